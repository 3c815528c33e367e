"""Simulator scale and speed: big meshes, and chaos seeds per wall minute.

Prints one JSON line per measurement:

- ``sim_broadcast_gather``, per size: wall seconds to set up a cluster of that
  many simulated procs and run broadcast+gather rounds, simulated seconds, and
  delivered messages per wall second; the same in CPU seconds of this process
  (``*_cpu_s``), which other load on the machine disturbs less.
  ``setup_gc_cpu_s`` and ``round_gc_cpu_s`` are the parts of the set-up and
  of a round spent in the garbage collector.
- ``sim_profile``, per size, with ``--profile``: where the rounds' time goes,
  from cProfile: the microseconds of own time per delivered message in each
  part of the code (``areas``) and in the functions that take most
  (``functions``). cProfile slows the rounds down about twice; read the
  shares, not the totals. The profiled rounds run with the garbage collector
  off (its share shows in an unprofiled run's ``round_gc_cpu_s``).
- ``chaos_training``: the training-loop chaos scenario
  (``examples/chaos/training.py``) run over a range of seeds, each with its
  random fault plan: seeds per wall minute, and simulated seconds per wall
  second and per CPU second of this process.

    python benchmarks/sim_scale.py                         # 1,024 and 10,000 procs, 200 seeds
    python benchmarks/sim_scale.py --sizes 1024 --seeds 50
    python benchmarks/sim_scale.py --sizes 10000 --seeds 0 --profile
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import pstats
import sys
import time
from collections import defaultdict
from pathlib import Path

import danaus.sim
from danaus import Actor, current_rank, endpoint, hosts
from danaus.chaos import run_seeds
from danaus.core.trace import Received

ROOT = Path(__file__).resolve().parent.parent

GPUS_PER_HOST = 8


class Echo(Actor):
    @endpoint
    def rank(self, round_: int) -> int:
        return current_rank().rank + round_


class CollectorClock:
    """CPU seconds the garbage collector spent in each phase of a run (``phase``: None, none)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.phase: str | None = None
        self._start = 0.0
        gc.callbacks.append(self._observe)

    def _observe(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._start = time.process_time()
        elif self.phase is not None:
            self.seconds[self.phase] += time.process_time() - self._start

    def close(self) -> None:
        gc.callbacks.remove(self._observe)


def measure(procs: int, rounds: int, profiler: cProfile.Profile | None = None) -> dict:
    """Set up ``procs`` procs and run ``rounds`` broadcast+gather rounds.

    ``profiler`` sees the rounds only, with the garbage collector off, so that
    its collections are not counted as the time of whatever code triggered them.
    """
    host_count = max(1, procs // GPUS_PER_HOST)
    timings: dict[str, float] = {}
    collector = CollectorClock()

    def main() -> int:
        start, cpu = time.perf_counter(), time.process_time()
        collector.phase = "setup"
        mesh = hosts().spawn_procs({"gpus": GPUS_PER_HOST}).spawn("echo", Echo)
        mesh.initialized.get()
        timings["setup"] = time.perf_counter() - start
        timings["setup_cpu"] = time.process_time() - cpu
        start, cpu = time.perf_counter(), time.process_time()
        collector.phase = "rounds"
        if profiler is not None:
            gc.disable()
            profiler.enable()
        received = 0
        for r in range(rounds):
            received += len(mesh.rank.call(r).get())
        if profiler is not None:
            profiler.disable()
            gc.enable()
        collector.phase = None
        timings["rounds"] = time.perf_counter() - start
        timings["rounds_cpu"] = time.process_time() - cpu
        return received

    start, cpu = time.perf_counter(), time.process_time()
    try:
        run = danaus.sim.run(main, hosts=host_count, seed=0)
    finally:
        collector.close()
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    delivered = sum(1 for e in run.trace.events if isinstance(e, Received))
    round_messages = 2 * run.value
    return {
        "benchmark": "sim_broadcast_gather",
        "procs": host_count * GPUS_PER_HOST,
        "rounds": rounds,
        "wall_s": round(wall, 3),
        "setup_wall_s": round(timings["setup"], 3),
        "round_wall_s": round(timings["rounds"] / rounds, 3),
        "simulated_s": round(run.time, 6),
        "messages_delivered": delivered,
        "messages_per_wall_s": round(delivered / wall),
        "round_messages": round_messages,
        "round_messages_per_wall_s": round(round_messages / timings["rounds"]),
        "cpu_s": round(cpu, 3),
        "setup_cpu_s": round(timings["setup_cpu"], 3),
        "setup_gc_cpu_s": round(collector.seconds["setup"], 3),
        "round_cpu_s": round(timings["rounds_cpu"] / rounds, 3),
        "round_gc_cpu_s": round(collector.seconds["rounds"] / rounds, 3),
        "round_messages_per_cpu_s": round(round_messages / timings["rounds_cpu"]),
    }


LIBRARIES = ("asyncio", "cloudpickle", "greenlet", "msgspec")


def _area(file: str) -> str:
    """The part of the code ``file`` belongs to: a module of Danaus, or a library."""
    if "/danaus/" in file:
        return "danaus/" + file.rsplit("/danaus/", 1)[1]
    for library in LIBRARIES:
        if f"/{library}/" in file:
            return library
    return "built-in" if file == "~" else "other"


def profile_report(profiler: cProfile.Profile, procs: int, messages: int, top: int = 25) -> dict:
    """Own time per delivered message, by area and for the ``top`` functions."""
    stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    areas: dict[str, float] = defaultdict(float)
    functions = []
    for (file, line, name), (_, calls, own, total, _) in stats.items():
        areas[_area(file)] += own
        where = f"{file.rsplit('/', 1)[-1]}:{line}({name})" if file != "~" else name
        functions.append((own, total, calls, where))
    functions.sort(reverse=True)
    per_message = 1e6 / messages
    return {
        "benchmark": "sim_profile",
        "procs": procs,
        "messages": messages,
        "profiled_us_per_message": round(sum(areas.values()) * per_message, 2),
        "areas": {
            area: round(own * per_message, 2)
            for area, own in sorted(areas.items(), key=lambda item: -item[1])
        },
        "functions": [
            {
                "function": where,
                "calls_per_message": round(calls / messages, 2),
                "own_us_per_message": round(own * per_message, 2),
                "total_us_per_message": round(total * per_message, 2),
            }
            for own, total, calls, where in functions[:top]
        ],
    }


def measure_chaos(seeds: int) -> dict:
    """Run the training scenario over ``seeds`` seeds, each with its own fault plan."""
    sys.path.insert(0, str(ROOT / "examples" / "chaos"))
    from training import Training

    scenario = Training()
    start, cpu = time.perf_counter(), time.process_time()
    outcomes = run_seeds(scenario, range(seeds))
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    simulated = sum(o.trace.events[-1].t for o in outcomes if o.trace.events)
    return {
        "benchmark": "chaos_training",
        "seeds": seeds,
        "failed_seeds": sum(o.failed for o in outcomes),
        "faults": sum(len(o.plan.faults) for o in outcomes),
        "wall_s": round(wall, 3),
        "seeds_per_wall_minute": round(60 * seeds / wall),
        "simulated_s": round(simulated, 3),
        "simulated_s_per_wall_s": round(simulated / wall, 1),
        "cpu_s": round(cpu, 3),
        "simulated_s_per_cpu_s": round(simulated / cpu, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="*", default=[1024, 10_000])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seeds", type=int, default=200, help="chaos seeds; 0 skips them")
    parser.add_argument(
        "--profile", action="store_true", help="also profile the rounds (one sim_profile line)"
    )
    args = parser.parse_args()
    for procs in args.sizes:
        profiler = cProfile.Profile() if args.profile else None
        result = measure(procs, args.rounds, profiler)
        print(json.dumps(result), flush=True)
        if profiler is not None:
            report = profile_report(profiler, result["procs"], result["round_messages"])
            print(json.dumps(report), flush=True)
    if args.seeds:
        print(json.dumps(measure_chaos(args.seeds)), flush=True)


if __name__ == "__main__":
    main()
