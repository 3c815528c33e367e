"""What a cast to a large mesh costs the controller: 16 and 64 procs by default.

For each mesh size it prints two JSON lines:

- ``broadcast_gather``: ``mesh.echo.call(i).get()`` one after another: calls
  per second, and the controller's CPU time per call (every thread of its
  process: encoding, sending, receiving and gathering the answers);
- ``broadcast``: ``mesh.echo.broadcast(i)`` issued back to back, then one
  ``call`` that answers after all of them (a sender's messages arrive in order):
  casts per second, and the controller's CPU time per cast.

The controller sends one message per member of the mesh. Never fails on speed.

    .venv/bin/python benchmarks/broadcast.py                       # tcp, 16 and 64 procs
    .venv/bin/python benchmarks/broadcast.py --procs 16 --casts 200 --transport ucx
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import danaus
from danaus import Actor, endpoint, this_host

SETUP_TIMEOUT = 300.0


class Echo(Actor):
    @endpoint
    def echo(self, x: int) -> int:
        return x


def _timed(fn: object, count: int) -> tuple[float, float]:
    """Wall and controller CPU seconds of ``count`` runs of ``fn``."""
    wall, cpu = time.perf_counter(), time.process_time()
    for i in range(count):
        fn(i)  # type: ignore[operator]
    return time.perf_counter() - wall, time.process_time() - cpu


def _measure(procs: int, casts: int, warmup: int) -> list[dict[str, object]]:
    mesh = this_host().spawn_procs({"gpus": procs}).spawn("echo", Echo)
    mesh.echo.call(0).get(timeout=SETUP_TIMEOUT)

    def gather(i: int) -> None:
        mesh.echo.call(i).get(timeout=SETUP_TIMEOUT)

    def cast(i: int) -> None:
        mesh.echo.broadcast(i)

    _timed(gather, warmup)
    wall, cpu = _timed(gather, casts)
    lines: list[dict[str, object]] = [
        {
            "workload": "broadcast_gather",
            "calls_per_s": round(casts / wall, 1),
            "controller_cpu_us_per_call": round(cpu / casts * 1e6, 1),
        }
    ]
    wall, cpu = time.perf_counter(), time.process_time()
    _timed(cast, casts)
    mesh.echo.call(-1).get(timeout=SETUP_TIMEOUT)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    lines.append(
        {
            "workload": "broadcast",
            "casts_per_s": round(casts / wall, 1),
            "controller_cpu_us_per_cast": round(cpu / casts * 1e6, 1),
        }
    )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transport", default="tcp")
    parser.add_argument("--procs", default="16,64", help="comma-separated mesh sizes")
    parser.add_argument("--casts", type=int, default=500)
    parser.add_argument("--warmup", type=int, default=20)
    args = parser.parse_args(argv)
    for procs in (int(n) for n in args.procs.split(",")):
        danaus.configure(transport=args.transport, heartbeat_timeout=30.0)
        try:
            for line in _measure(procs, args.casts, args.warmup):
                info = {"transport": args.transport, "procs": procs, "casts": args.casts}
                print(json.dumps({"workload": line.pop("workload"), **info, **line}), flush=True)
        finally:
            danaus.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
