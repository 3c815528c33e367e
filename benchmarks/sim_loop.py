"""The simulator's event loop alone: what one callback, task step, timer or simulation event costs.

The loop is on the simulator's hot path. Prints one JSON line per workload,
with the median CPU time of ``--repeats`` runs and operations per CPU second:

- ``callbacks``: a chain of ``call_soon`` callbacks;
- ``task_steps``: 50 tasks each awaiting ``asyncio.sleep(0)`` in turn;
- ``timers``: 10,000 tasks sleeping for scattered virtual times (a large heap);
- ``sim_events``: a task awaiting futures that events of the simulation's timeline resolve.

    python benchmarks/sim_loop.py
    python benchmarks/sim_loop.py --quick
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import statistics
import time
from collections.abc import Callable

from danaus.transports.sim.loop import VirtualTimeLoop
from danaus.transports.sim.timeline import Timeline


def callbacks(loop: VirtualTimeLoop, n: int) -> int:
    left = [n]

    def step() -> None:
        left[0] -= 1
        if left[0]:
            loop.call_soon(step)

    loop.call_soon(step)
    loop.call_later(1, loop.stop)
    loop.run_forever()
    return n


def task_steps(loop: VirtualTimeLoop, n: int) -> int:
    tasks = 50

    async def worker() -> None:
        for _ in range(n // tasks):
            await asyncio.sleep(0)

    async def main() -> None:
        await asyncio.gather(*(worker() for _ in range(tasks)))

    loop.run_until_complete(main())
    return n


def timers(loop: VirtualTimeLoop, n: int) -> int:
    sleepers = 10_000
    rounds = max(1, n // sleepers)

    async def sleeper(i: int) -> None:
        for k in range(rounds):
            await asyncio.sleep(0.001 * ((i * 7919 + k * 104729) % 1000 + 1))

    async def main() -> None:
        await asyncio.gather(*(sleeper(i) for i in range(sleepers)))

    loop.run_until_complete(main())
    return sleepers * rounds


def sim_events(loop: VirtualTimeLoop, n: int) -> int:
    timeline = loop.timeline

    async def main() -> None:
        for _ in range(n):
            future = loop.create_future()
            timeline.call_later(0.001, lambda _, f=future: f.set_result(None))
            await future

    loop.run_until_complete(main())
    return n


WORKLOADS: dict[str, tuple[Callable[[VirtualTimeLoop, int], int], int]] = {
    "callbacks": (callbacks, 200_000),
    "task_steps": (task_steps, 50_000),
    "timers": (timers, 100_000),
    "sim_events": (sim_events, 20_000),
}


def measure(name: str, size: int, repeats: int) -> dict:
    workload, _ = WORKLOADS[name]
    seconds = []
    for _ in range(repeats):
        loop = VirtualTimeLoop(Timeline())
        gc.collect()
        start = time.process_time()
        operations = workload(loop, size)
        seconds.append(time.process_time() - start)
        loop.close()
    median = statistics.median(seconds)
    return {
        "benchmark": f"sim_loop_{name}",
        "operations": operations,
        "repeats": repeats,
        "cpu_s_median": round(median, 4),
        "cpu_s_min": round(min(seconds), 4),
        "cpu_s_max": round(max(seconds), 4),
        "operations_per_cpu_s": round(operations / median),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="a tenth of the work, one run")
    args = parser.parse_args()
    repeats = 1 if args.quick else args.repeats
    for name, (_, size) in WORKLOADS.items():
        size = size // 10 if args.quick else size
        print(json.dumps(measure(name, size, repeats)), flush=True)


if __name__ == "__main__":
    main()
