"""SLURM's commands, as a job uses them: submit, ask about a job and its nodes, cancel.

Every answer comes from SLURM itself (``sbatch``, ``scontrol``, ``scancel``),
so a job works wherever those commands reach the cluster's controller.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence

from danaus.job.base import SchedulerMissing

ACTIVE = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "RESIZING"}
"""Job states in which a job holds, or waits for, its allocation."""


def run(argv: Sequence[str], timeout: float = 60.0) -> str:
    """The output of a SLURM command; `SchedulerMissing` if SLURM is not installed."""
    if shutil.which(argv[0]) is None:
        raise SchedulerMissing(
            f"SLURM's {argv[0]} is not on PATH: run this where SLURM's commands are installed"
        )
    done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout


def submit(script: str, options: Sequence[str]) -> str:
    """Submit a batch script with ``sbatch``; the job's id."""
    return run(["sbatch", "--parsable", *options, script]).strip().split(";")[0]


def job_info(job_id: str) -> dict[str, str]:
    """``scontrol show job``'s fields of a job; empty once SLURM has forgotten it."""
    try:
        text = run(["scontrol", "show", "job", "--oneliner", job_id])
    except RuntimeError as exc:
        if "Invalid job id" in str(exc):
            return {}
        raise
    return fields(text)


def jobs_info(job_id: str) -> list[dict[str, str]]:
    """``scontrol show job``'s records of a job: one, or for an array job one per task (tasks
    still pending may share one, whose ``ArrayTaskId`` is a range); none once SLURM has
    forgotten it."""
    try:
        text = run(["scontrol", "show", "job", "--oneliner", job_id])
    except RuntimeError as exc:
        if "Invalid job id" in str(exc):
            return []
        raise
    return [fields(line) for line in text.splitlines() if line.strip()]


def queued(job_id: str) -> bool:
    """Whether ``squeue`` lists the job (pending, running, suspended or completing)."""
    try:
        return bool(run(["squeue", "--noheader", "--jobs", job_id, "--format", "%T"]).strip())
    except RuntimeError as exc:
        if "Invalid job id" in str(exc):
            return False
        raise


def hostnames(nodelist: str) -> list[str]:
    """The node names of a node list such as ``n[1-3]``, in SLURM's order."""
    return run(["scontrol", "show", "hostnames", nodelist]).split()


def node_address(node: str) -> str:
    """The address SLURM reaches ``node`` at (its ``NodeAddr``)."""
    return fields(run(["scontrol", "show", "node", "--oneliner", node]))["NodeAddr"]


def cancel(job_id: str) -> None:
    run(["scancel", job_id])


def fields(text: str) -> dict[str, str]:
    """``Key=Value`` fields of one of ``scontrol``'s one-line answers."""
    found = {}
    for word in text.split():
        key, sep, value = word.partition("=")
        if sep:
            found[key] = value
    return found
