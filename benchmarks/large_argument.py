"""A large argument over a real transport: how long it takes, and whether heartbeats go on.

Prints one JSON line: the median, lowest and highest seconds of ``--runs``
calls that pass a ``--size``-MiB buffer (1 GiB by default) to one of two
worker procs, and the longest silence of any worker's heartbeats that the
controller saw during the calls (sampled every 10 ms). With the default
heartbeat timeout of 3 s, a silence that long declares a proc lost.

    python benchmarks/large_argument.py                  # tcp, encrypted (the default)
    python benchmarks/large_argument.py --no-encrypt     # tcp in clear
    python benchmarks/large_argument.py --transport ucx
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time

import danaus
from danaus import Actor, endpoint, this_host
from danaus.core.config import installed

MiB = 1024 * 1024


class Sink(Actor):
    @endpoint
    def received(self, data: memoryview) -> int:
        return memoryview(data).nbytes


class Silence:
    """The longest time any of ``procs`` went without answering a heartbeat, as the controller
    counts it, sampled on a thread."""

    def __init__(self, procs: list[str]) -> None:
        self.longest = 0.0
        self._procs = procs
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> Silence:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()

    def _sample(self) -> None:
        """Every 10 ms, and once more at the end, however short the transfer."""
        directory = installed().directory
        while True:
            for proc in self._procs:
                silence = directory.silence(proc)
                if silence is not None:
                    self.longest = max(self.longest, silence)
            if self._done.is_set():
                return
            self._done.wait(0.01)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transport", default="tcp")
    parser.add_argument("--size", type=int, default=1024, help="MiB (default 1024)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--no-encrypt", action="store_true")
    args = parser.parse_args()
    options = {"encrypt": False} if args.no_encrypt else {}
    danaus.configure(transport=args.transport, **options)
    procs = this_host().spawn_procs(per_host={"w": 2})
    sinks = procs.spawn("sinks", Sink)
    sinks.received.call(memoryview(b"up")).get(timeout=60)
    workers = installed().faults.workers(installed().hosts()[0])
    data = memoryview(bytearray(args.size * MiB))
    times = []
    with Silence(workers) as silence:
        for _ in range(args.runs):
            started = time.perf_counter()
            received = sinks.slice(w=0).received.call_one(data).get(timeout=600)
            times.append(time.perf_counter() - started)
            if received != data.nbytes:
                raise RuntimeError(f"{received} bytes arrived of {data.nbytes}")
        alive = list(sinks.received.call(memoryview(b"x")).get(timeout=60).values())
    print(
        json.dumps(
            {
                "benchmark": "large_argument",
                "transport": args.transport,
                "encrypt": not args.no_encrypt,
                "mib": args.size,
                "runs": args.runs,
                "median_s": round(statistics.median(times), 3),
                "min_s": round(min(times), 3),
                "max_s": round(max(times), 3),
                "median_mb_per_s": round(data.nbytes / statistics.median(times) / 1e6, 1),
                "longest_heartbeat_silence_s": round(silence.longest, 3),
                "heartbeat_timeout_s": installed().options.heartbeat_timeout,
                "procs_alive_after": len(alive),
            }
        )
    )
    danaus.shutdown()


if __name__ == "__main__":
    main()
