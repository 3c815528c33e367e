"""Ways to receive a large ``bytes`` argument, timed in one thread: which costs least.

A connection receives a frame into memory and unpickling hands the endpoint a
``bytes`` object. Four ways, each filling the frame with a copy of the payload
(as opening its records does) and making the ``bytes``, ``--repeats`` times, the
previous value dropped before the next arrives, as a program that passes a new
argument each call does:

- ``kept_buffer_and_copy``: a mapped buffer the connection keeps, then a copy
  into a new ``bytes`` (how 64 MiB arrived before);
- ``new_storage``: straight into the storage of a new ``bytes`` object;
- ``new_storage_populated``: the same, its pages populated in one call first;
- ``kept_storage``: into the storage of a ``bytes`` object the connection kept
  and that nothing else refers to any more (what `BufferCache` does).

Prints one JSON line per way: the median CPU time of the thread and the wall
time per frame, in ms.

    python benchmarks/bytes_receive.py                # 64 MiB, 15 times each
    python benchmarks/bytes_receive.py --mib 16 --repeats 30
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import sys
import time
from collections.abc import Callable

from danaus.core import serialize
from danaus.transports.tcp import buffers
from danaus.transports.tcp.streams import KEPT_BYTES


def _ways(payload: bytes) -> dict[str, Callable[[], bytes]]:
    """Each way: a function that receives ``payload`` once and returns the ``bytes``."""
    pickle, frame = serialize.dumps(payload)
    size = len(frame)
    mapped = buffers.BufferCache(KEPT_BYTES)
    kept = buffers.BufferCache(KEPT_BYTES)

    def received(storage: memoryview) -> bytes:
        storage[:] = frame
        return serialize.loads([pickle, storage])

    def populated() -> memoryview:
        storage = serialize.bytes_storage(size)
        buffers._populate(ctypes.addressof(storage.obj), size)
        return storage

    return {
        "kept_buffer_and_copy": lambda: received(mapped.allocate(size)),
        "new_storage": lambda: received(serialize.bytes_storage(size)),
        "new_storage_populated": lambda: received(populated()),
        "kept_storage": lambda: received(kept.frames([size])[0]),
    }


def _time(receive: Callable[[], bytes], size: int, repeats: int) -> dict[str, float]:
    cpu, wall = [], []
    for _ in range(repeats):
        started, used = time.perf_counter(), time.thread_time()
        value = receive()
        cpu.append(time.thread_time() - used)
        wall.append(time.perf_counter() - started)
        if len(value) != size:
            raise AssertionError(f"received {len(value)} bytes, not {size}")
        del value
    return {
        "cpu_ms": round(statistics.median(cpu) * 1e3, 2),
        "wall_ms": round(statistics.median(wall) * 1e3, 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--mib", type=int, default=64, help="the argument's size in MiB")
    parser.add_argument("--repeats", type=int, default=15, help="frames received per way")
    args = parser.parse_args(argv)
    payload = os.urandom(args.mib * 1024 * 1024)
    for way, receive in _ways(payload).items():
        figures = _time(receive, len(payload), args.repeats)
        line = {"workload": "bytes_receive", "way": way, "mib": args.mib, **figures}
        print(json.dumps(line), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
