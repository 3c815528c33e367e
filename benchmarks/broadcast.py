"""What a cast to a large mesh costs the controller: 16 and 64 procs by default.

For each mesh size it prints two JSON lines:

- ``broadcast_gather``: ``mesh.echo.call(i).get()`` one after another: calls
  per second, and the controller's CPU time per call (every thread of its
  process: encoding, sending, receiving and gathering the answers);
- ``broadcast``: ``mesh.echo.broadcast(i)`` issued back to back, then one
  ``call`` that answers after all of them (a sender's messages arrive in order):
  casts per second, and the controller's CPU time per cast.

A cast to more procs than the world's ``cast_fanout`` (``--fanout``; by default
the world's own) leaves the controller as at most that many messages, which
the procs pass on along a tree. On ``sim`` every proc lives in this process,
8 to a simulated host: its CPU time is the whole simulation's, and each line
also gives the simulated time per call or cast. On a real transport a
process's CPU time counts its threads' polling between messages
(``wait_spin_us``, docs/transports.md): ``--wait-spin-us 0`` gives the CPU
that the work itself takes. Never fails on speed.

    .venv/bin/python benchmarks/broadcast.py                       # tcp, 16 and 64 procs
    .venv/bin/python benchmarks/broadcast.py --procs 16 --casts 200 --transport ucx
    .venv/bin/python benchmarks/broadcast.py --wait-spin-us 0         # CPU without polling
    .venv/bin/python benchmarks/broadcast.py --transport sim --fanout 4
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from typing import Any

import danaus
from danaus import Actor, endpoint, hosts, this_host
from danaus.core import config

SETUP_TIMEOUT = 300.0
SIM_PROCS_PER_HOST = 8


class Echo(Actor):
    @endpoint
    def echo(self, x: int) -> int:
        return x


def _timed(fn: Callable[[int], None], count: int) -> tuple[float, float, float]:
    """Wall, CPU and world-clock seconds of ``count`` runs of ``fn``."""
    clock = config.current_world().loop.time
    wall, cpu, world = time.perf_counter(), time.process_time(), clock()
    for i in range(count):
        fn(i)
    return time.perf_counter() - wall, time.process_time() - cpu, clock() - world


def _sim_hosts(procs: int) -> int:
    return max(1, procs // SIM_PROCS_PER_HOST)


def _spawn(transport: str, procs: int) -> Any:
    if transport == "sim":
        per_host = {"gpus": procs // _sim_hosts(procs)}
        return hosts().spawn_procs(per_host).spawn("echo", Echo)
    return this_host().spawn_procs({"gpus": procs}).spawn("echo", Echo)


def _measure(transport: str, procs: int, casts: int, warmup: int) -> list[dict[str, object]]:
    mesh = _spawn(transport, procs)
    mesh.echo.call(0).get(timeout=SETUP_TIMEOUT)

    def gather(i: int) -> None:
        mesh.echo.call(i).get(timeout=SETUP_TIMEOUT)

    def cast(i: int) -> None:
        mesh.echo.broadcast(i)

    def cast_all(_: int) -> None:
        _timed(cast, casts)
        mesh.echo.call(-1).get(timeout=SETUP_TIMEOUT)

    _timed(gather, warmup)
    wall, cpu, world = _timed(gather, casts)
    gathered: dict[str, object] = {
        "workload": "broadcast_gather",
        "calls_per_s": round(casts / wall, 1),
        "controller_cpu_us_per_call": round(cpu / casts * 1e6, 1),
    }
    wall, cpu, world_all = _timed(cast_all, 1)
    broadcast: dict[str, object] = {
        "workload": "broadcast",
        "casts_per_s": round(casts / wall, 1),
        "controller_cpu_us_per_cast": round(cpu / casts * 1e6, 1),
    }
    if transport == "sim":
        gathered["simulated_us_per_call"] = round(world / casts * 1e6, 2)
        broadcast["simulated_us_per_cast"] = round(world_all / casts * 1e6, 2)
    return [gathered, broadcast]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transport", default="tcp")
    parser.add_argument("--procs", default="16,64", help="comma-separated mesh sizes")
    parser.add_argument("--casts", type=int, default=500)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--fanout", type=int, help="the world's cast_fanout (default: its own)")
    parser.add_argument(
        "--wait-spin-us", type=int, help="the world's wait_spin_us (default: its own; not on sim)"
    )
    args = parser.parse_args(argv)
    sizes = [int(n) for n in args.procs.split(",")]
    if args.transport == "sim" and any(n % _sim_hosts(n) for n in sizes):
        parser.error(f"on sim, --procs must be at most {SIM_PROCS_PER_HOST} or a multiple of it")
    if args.transport == "sim" and args.wait_spin_us is not None:
        parser.error("--wait-spin-us is an option of the real transports; sim has no threads")
    for procs in sizes:
        options: dict[str, object] = {}
        if args.fanout is not None:
            options["cast_fanout"] = args.fanout
        if args.wait_spin_us is not None:
            options["wait_spin_us"] = args.wait_spin_us
        if args.transport == "sim":
            options["hosts"] = _sim_hosts(procs)
        else:
            options["heartbeat_timeout"] = 30.0
        danaus.configure(transport=args.transport, **options)
        try:
            world = config.current_world()
            fanout = world.options.cast_fanout
            spin = None if args.transport == "sim" else world.options.wait_spin_us
            for line in _measure(args.transport, procs, args.casts, args.warmup):
                row = {
                    "workload": line.pop("workload"),
                    "transport": args.transport,
                    "procs": procs,
                    "casts": args.casts,
                    "cast_fanout": fanout,
                    "wait_spin_us": spin,
                    **line,
                }
                print(json.dumps(row), flush=True)
        finally:
            danaus.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
