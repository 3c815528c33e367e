"""Simulator scale: a broadcast+gather round over many simulated procs.

Prints one JSON line per size: wall seconds to set up the cluster and run the
round, simulated seconds, and delivered messages per wall second.
"""

from __future__ import annotations

import argparse
import json
import time

import danaus.sim
from danaus import Actor, current_rank, endpoint, hosts

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
    delivered = sum(1 for e in run.trace.events if e["kind"] == "recv")
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1024, 10_000])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    for procs in args.sizes:
        print(json.dumps(measure(procs, args.rounds)), flush=True)


if __name__ == "__main__":
    main()
