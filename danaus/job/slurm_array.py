"""An array job: one batch script that SLURM runs as many tasks, each told its index.

`SlurmArray.submit` submits the script with ``sbatch --array``: every task, or
only some (to run again those that did not finish). SLURM gives each task its
index in ``SLURM_ARRAY_TASK_ID`` and runs as many at once as the cluster has
room for (or ``max_running``). `slurm_commands.queued` says whether a task of
the job is still pending or running, `task_states` what SLURM says of each task it still
remembers (until it forgets finished jobs, after ``MinJobAge``: 300 s by
default). SLURM keeps no results: a task leaves what it made in files.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from danaus.job import slurm_commands


@dataclass(frozen=True)
class TaskState:
    """What SLURM says of one task of an array job."""

    state: str
    """``COMPLETED``, ``FAILED``, ``CANCELLED``, ``TIMEOUT``, ``RUNNING``..."""
    exit_code: str
    """``status:signal``, as SLURM gives it (``1:0``: exited with 1; ``0:9``: killed by 9)."""
    node: str


def array_indices(indices: Sequence[int]) -> str:
    """``--array``'s list of ``indices``, runs of them as ranges: ``0-5,8,10-12``."""
    parts: list[str] = []
    ordered = sorted(set(indices))
    start = previous = ordered[0]
    for index in [*ordered[1:], None]:
        if index is not None and index == previous + 1:
            previous = index
            continue
        parts.append(str(start) if start == previous else f"{start}-{previous}")
        if index is not None:
            start = previous = index
    return ",".join(parts)


@dataclass
class SlurmArray:
    """``script`` run as ``tasks`` tasks (indices 0 to ``tasks - 1``), each task's output to
    ``output`` (a path in which SLURM puts the task's index for ``%a``).

    ``partition``, ``time_limit`` (SLURM's ``--time``, for each task) and
    ``sbatch_args`` (more ``sbatch`` options) shape the tasks' allocations;
    ``max_running`` bounds how many run at once (SLURM's ``%`` limit).
    """

    script: Path
    tasks: int
    output: str
    job_name: str = "danaus-array"
    partition: str | None = None
    time_limit: str | None = None
    sbatch_args: list[str] = field(default_factory=list)
    max_running: int | None = None

    def __post_init__(self) -> None:
        if self.tasks < 1:
            raise ValueError(f"an array job needs at least one task, not {self.tasks}")
        if self.max_running is not None and self.max_running < 1:
            raise ValueError(f"max_running must be at least 1, not {self.max_running}")

    def submit(self, indices: Sequence[int] | None = None) -> str:
        """Submit the tasks ``indices`` (default: all); the array job's id."""
        chosen = range(self.tasks) if indices is None else indices
        if not chosen or not all(0 <= i < self.tasks for i in chosen):
            raise ValueError(f"task indices must be among 0..{self.tasks - 1}, not {chosen}")
        limit = f"%{self.max_running}" if self.max_running else ""
        options = [
            f"--array={array_indices(chosen)}{limit}",
            "--ntasks=1",
            f"--job-name={self.job_name}",
            f"--output={self.output}",
            "--open-mode=append",
            f"--chdir={Path.cwd()}",
            "--export=ALL",
        ]
        if self.partition:
            options.append(f"--partition={self.partition}")
        if self.time_limit:
            options.append(f"--time={self.time_limit}")
        return slurm_commands.submit(str(self.script), [*options, *self.sbatch_args])


def task_states(job_id: str) -> dict[int, TaskState]:
    """What SLURM says of each task of ``job_id`` with an index of its own (not those still
    pending together), while it remembers them."""
    states = {}
    for record in slurm_commands.jobs_info(job_id):
        index = record.get("ArrayTaskId", "")
        if index.isdigit():
            states[int(index)] = TaskState(
                record.get("JobState", "UNKNOWN"),
                record.get("ExitCode", "?"),
                record.get("BatchHost", "") or record.get("NodeList", ""),
            )
    return states


def task_index() -> int:
    """The index SLURM gave the task running this process (``SLURM_ARRAY_TASK_ID``)."""
    found = os.environ.get("SLURM_ARRAY_TASK_ID", "")
    if not found.isdigit():
        raise RuntimeError("not a task of a SLURM array job: SLURM_ARRAY_TASK_ID is not set")
    return int(found)
