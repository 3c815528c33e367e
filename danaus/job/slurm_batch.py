"""The batch script of a `SlurmJob`, run by SLURM on the allocation's first node.

``python -m danaus.job.slurm_batch DIRECTORY PORT [SCRIPT ARGS...]`` starts
a worker on every node of the allocation with one ``srun`` step
(`danaus.job.slurm_node`). Without a script it waits for that step, which
runs until the job is cancelled. With one (batch mode) it waits for every
worker to listen, runs the script as the job's controller with the workers
named in its environment (``DANAUS_WORKERS``, ``DANAUS_BIND_HOST``,
``DANAUS_JOB_KEY_FILE``), so that its `danaus.hosts()` are the allocation's
nodes, and then ends the workers and exits with the script's status.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from danaus.core.settings import variable
from danaus.job import processes
from danaus.job.slurm_commands import hostnames, node_address

START_TIMEOUT = 120.0
"""Seconds the workers may take to listen."""


def start_workers(directory: Path, port: int, nodes: list[str]) -> subprocess.Popen[bytes]:
    """One ``srun`` step running a worker on each node."""
    return subprocess.Popen(
        ["srun", f"--nodes={len(nodes)}", "--ntasks-per-node=1", "--kill-on-bad-exit=1",
         sys.executable, "-m", "danaus.job.slurm_node", str(directory), str(port)]
    )


def controller_environment(
    directory: Path, nodes: list[str], step: subprocess.Popen[bytes]
) -> dict[str, str]:
    """The environment of a controller of the workers, once every one listens."""

    def failed() -> str | None:
        code = step.poll()
        return None if code is None else f"the workers' srun step exited with {code}"

    addresses = [
        processes.wait_for_file(directory / "workers" / node, START_TIMEOUT, failed)
        for node in nodes
    ]
    here = os.environ.get("SLURMD_NODENAME", nodes[0])
    return {
        **os.environ,
        variable("workers"): ",".join(addresses),
        variable("bind_host"): node_address(here),
        variable("job_key_file"): str(directory / "job.key"),
        "DANAUS_JOB_DIRECTORY": str(directory),
    }


def main(argv: list[str]) -> int:
    directory, port, client = Path(argv[0]), int(argv[1]), argv[2:]
    nodes = hostnames(os.environ["SLURM_JOB_NODELIST"])
    step = start_workers(directory, port, nodes)
    if not client:
        return step.wait()
    try:
        env = controller_environment(directory, nodes, step)
        return subprocess.run([sys.executable, *client], env=env).returncode
    finally:
        step.terminate()
        step.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
