"""Simulator scale and speed: big meshes, and chaos seeds per wall minute.

Prints one JSON line per measurement:

- ``sim_broadcast_gather``, per size: wall seconds to set up a cluster of that
  many simulated procs and run broadcast+gather rounds, simulated seconds, and
  delivered messages per wall second.
- ``chaos_training``: the training-loop chaos scenario
  (``examples/chaos/training.py``) run over a range of seeds, each with its
  random fault plan: seeds per wall minute, and simulated seconds per wall
  second.

    python benchmarks/sim_scale.py                         # 1,024 and 10,000 procs, 200 seeds
    python benchmarks/sim_scale.py --sizes 1024 --seeds 50
"""

from __future__ import annotations

import argparse
import json
import sys
import time
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


def measure(procs: int, rounds: int) -> dict:
    host_count = max(1, procs // GPUS_PER_HOST)
    timings: dict[str, float] = {}

    def main() -> int:
        start = time.perf_counter()
        mesh = hosts().spawn_procs({"gpus": GPUS_PER_HOST}).spawn("echo", Echo)
        mesh.initialized.get()
        timings["setup"] = time.perf_counter() - start
        start = time.perf_counter()
        received = 0
        for r in range(rounds):
            received += len(mesh.rank.call(r).get())
        timings["rounds"] = time.perf_counter() - start
        return received

    start = time.perf_counter()
    run = danaus.sim.run(main, hosts=host_count, seed=0)
    wall = time.perf_counter() - start
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
        "round_messages_per_wall_s": round(round_messages / timings["rounds"]),
    }


def measure_chaos(seeds: int) -> dict:
    """Run the training scenario over ``seeds`` seeds, each with its own fault plan."""
    sys.path.insert(0, str(ROOT / "examples" / "chaos"))
    from training import Training

    scenario = Training()
    start = time.perf_counter()
    outcomes = run_seeds(scenario, range(seeds))
    wall = time.perf_counter() - start
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
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="*", default=[1024, 10_000])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seeds", type=int, default=200, help="chaos seeds; 0 skips them")
    args = parser.parse_args()
    for procs in args.sizes:
        print(json.dumps(measure(procs, args.rounds)), flush=True)
    if args.seeds:
        print(json.dumps(measure_chaos(args.seeds)), flush=True)


if __name__ == "__main__":
    main()
