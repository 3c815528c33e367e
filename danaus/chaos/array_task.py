"""What a task of a chaos array run runs (`danaus.chaos.array`): its part of the seeds.

``python -m danaus.chaos.array_task DIRECTORY [INDEX]``: the index is
SLURM's (``SLURM_ARRAY_TASK_ID``) unless given, so a task also runs by hand.
It runs the seeds of its part that have no result yet, writing each seed's
result as it ends, and exits with 0 once they have all run.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from danaus.chaos.array import ArrayRun
from danaus.chaos.cli import scenario_from
from danaus.chaos.results import SeedResult
from danaus.chaos.runner import iter_seeds
from danaus.cli import load
from danaus.job.slurm_array import task_index


def run_task(run: ArrayRun, index: int) -> int:
    """Run what task ``index`` has left; how many seeds that was."""
    done = run.read(index).results
    left = [seed for seed in run.spec.part(index) if seed not in done]
    scenario = scenario_from(run.spec.location, load)
    with run.writer(index) as results:
        results.started()
        last = time.perf_counter()
        for outcome in iter_seeds(scenario, left, determinism_rate=run.spec.determinism):
            now = time.perf_counter()
            results.add(SeedResult.of(outcome, now - last))
            last = now
    return len(left)


def main(argv: list[str]) -> int:
    run = ArrayRun.open(Path(argv[0]))
    index = int(argv[1]) if len(argv) > 1 else task_index()
    ran = run_task(run, index)
    print(f"task {index}: ran {ran:,} seeds of {len(run.spec.part(index)):,}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
