"""`SlurmJob`: hosts from a SLURM allocation, one worker on each node.

`SlurmJob.apply` submits a batch script with ``sbatch`` for as many nodes as
the meshes need; in the allocation, one ``srun`` step starts ``danaus
worker`` on every node (`danaus.job.slurm_batch`, `danaus.job.slurm_node`).
The nodes' names come from SLURM (``scontrol show hostnames`` of the job's
node list), and each worker listens on its node's address as SLURM records it
(``NodeAddr``) and writes where it listens into the job's directory. The job's
key is a file of that directory that only its owner can read, so the
directory must be on a file system the nodes share (as a home directory is).
Meshes take the allocation's nodes in order: with ``{"trainers": 2,
"generators": 1}``, the first two nodes are ``trainers``.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from danaus.job import processes, slurm_commands
from danaus.job.base import Job, JobNotApplied
from danaus.job.waiting import poll

POLL = 0.2
"""Seconds between asks of SLURM about a job."""
CANCEL_TIMEOUT = 120.0
"""Seconds SLURM may take to end a job's processes after scancel."""
START_TIMEOUT = 300.0
"""Seconds to wait for the allocation and its workers (a busy cluster may queue the job)."""


class SlurmJob(Job):
    """Meshes of SLURM nodes: ``SlurmJob(meshes={"trainers": 3}, partition="gpu")``.

    ``port`` is where each worker listens on its node (26600; 0 picks a free
    port on each node, as when several SLURM nodes share one host).
    ``partition``, ``time_limit`` (SLURM's ``--time``, e.g. ``"1:00:00"``) and
    ``sbatch_args`` (more ``sbatch`` options) shape the allocation. ``python``
    is the interpreter the nodes run (this one by default: the same path on
    every node). ``start_timeout`` bounds how long `apply` waits for the
    allocation and every worker.
    """

    kind = "slurm"

    def __init__(
        self,
        meshes: Mapping[str, int],
        *,
        port: int = 26600,
        partition: str | None = None,
        time_limit: str | None = None,
        sbatch_args: Sequence[str] = (),
        python: str | None = None,
        start_timeout: float = START_TIMEOUT,
        job_name: str = "danaus",
        directory: str | os.PathLike[str] | None = None,
    ) -> None:
        super().__init__(meshes, directory=directory)
        if not 0 <= port < 65536:
            raise ValueError(f"port must be 0..65535, not {port!r}")
        if isinstance(sbatch_args, str):
            raise TypeError("sbatch_args must be a list of options, not one string")
        self.port = port
        self.partition = partition
        self.time_limit = time_limit
        self.sbatch_args = list(sbatch_args)
        self.python = python or sys.executable
        self.start_timeout = start_timeout
        self.job_name = job_name
        self._client: list[str] = []

    def config(self) -> dict[str, Any]:
        return {
            "meshes": self.meshes,
            "port": self.port,
            "partition": self.partition,
            "time_limit": self.time_limit,
            "sbatch_args": self.sbatch_args,
            "python": self.python,
            "start_timeout": self.start_timeout,
            "job_name": self.job_name,
        }

    def apply(self, client_script: str | os.PathLike[str] | None = None,
              args: Sequence[str] = ()) -> None:
        """Allocate the nodes and start their workers; with ``client_script``, batch mode.

        In batch mode the script runs inside the allocation, as the job's
        controller, once every worker listens: its ``hosts()`` (and
        ``this_host()``) are the allocation's nodes. `apply` returns once the
        job is submitted; `wait` waits for it to end, and its output is in
        `output`.
        """
        if client_script is not None:
            script = Path(client_script)
            if not script.is_file():
                raise FileNotFoundError(f"no client script {client_script}")
            self._client = [str(script.absolute()), *map(str, args)]
        else:
            self._client = []
        super().apply()

    @property
    def job_id(self) -> str:
        """SLURM's id of the job's allocation."""
        if not self.running:
            raise JobNotApplied(f"the job in {self.directory} has not been applied")
        return self.running["job_id"]

    @property
    def output(self) -> Path:
        """The file receiving the batch script's output (and a batch client's)."""
        return self.directory / f"slurm-{self.job_id}.out"

    def start(self) -> dict[str, Any]:
        workers = self.directory / "workers"
        shutil.rmtree(workers, ignore_errors=True)
        workers.mkdir()
        script = self.directory / "batch.sh"
        command = [self.python, "-m", "danaus.job.slurm_batch", str(self.directory),
                   str(self.port), *self._client]
        script.write_text(f"#!/bin/sh\nexec {shlex.join(command)}\n")
        options = [
            f"--nodes={sum(self.meshes.values())}",
            "--ntasks-per-node=1",
            f"--job-name={self.job_name}",
            f"--output={self.directory}/slurm-%j.out",
            f"--chdir={Path.cwd()}",
            "--export=ALL",
        ]
        if self.partition:
            options.append(f"--partition={self.partition}")
        if self.time_limit:
            options.append(f"--time={self.time_limit}")
        job_id = slurm_commands.submit(str(script), [*options, *self.sbatch_args])
        running: dict[str, Any] = {"job_id": job_id, "batch": bool(self._client)}
        if self._client:
            return running
        try:
            running.update(self._wait_for_workers(job_id))
        except BaseException:
            self._cancel(job_id)
            raise
        return running

    def addresses(self) -> dict[str, list[str]]:
        if self.running.get("batch"):
            raise RuntimeError(
                "a job applied with a client script is that script's: it attaches there "
                "(its hosts() are the allocation's nodes)"
            )
        found, addresses = {}, iter(self.running["addresses"])
        for mesh, count in self.meshes.items():
            found[mesh] = [next(addresses) for _ in range(count)]
        return found

    def stop(self) -> None:
        self._cancel(self.running["job_id"])

    def is_running(self) -> bool:
        return slurm_commands.job_info(self.running["job_id"]).get("JobState") in (
            slurm_commands.ACTIVE
        )

    def wait(self, timeout: float | None = None) -> str:
        """Wait until the job ends; SLURM's final state of it (``COMPLETED``, ``FAILED``...)."""

        def final_state() -> str | None:
            state = slurm_commands.job_info(self.job_id).get("JobState", "GONE")
            return None if state in slurm_commands.ACTIVE else state

        state = poll(final_state, every=POLL, timeout=timeout)
        if state is None:
            now = slurm_commands.job_info(self.job_id).get("JobState", "GONE")
            raise TimeoutError(f"SLURM job {self.job_id} is still {now}")
        return state

    def _wait_for_workers(self, job_id: str) -> dict[str, Any]:
        """The allocation's nodes, and each one's worker's address once it listens."""
        deadline = time.monotonic() + self.start_timeout

        def failed() -> str | None:
            state = slurm_commands.job_info(job_id).get("JobState", "GONE")
            if state in slurm_commands.ACTIVE:
                return None
            tail = processes.log_tail(self.directory / f"slurm-{job_id}.out")
            return f"SLURM job {job_id} ended ({state}) before its workers listened:\n{tail}"

        def allocated() -> dict[str, Any] | None:
            info = slurm_commands.job_info(job_id)
            if info.get("JobState") == "RUNNING":
                return info
            reason = failed()
            if reason is not None:
                raise RuntimeError(reason)
            return None

        info = poll(allocated, every=POLL, timeout=self.start_timeout)
        if info is None:
            now = slurm_commands.job_info(job_id)
            raise TimeoutError(
                f"SLURM job {job_id} was not allocated within {self.start_timeout:g} s "
                f"({now.get('JobState')}, {now.get('Reason')})"
            )
        nodes = slurm_commands.hostnames(info["NodeList"])
        addresses = [
            processes.wait_for_file(
                self.directory / "workers" / node, max(deadline - time.monotonic(), 1), failed
            )
            for node in nodes
        ]
        return {"nodes": nodes, "addresses": addresses}

    def _cancel(self, job_id: str) -> None:
        """Cancel the job and wait until SLURM has ended its processes on every node.

        Ended means both ways SLURM tells: ``scontrol`` gives it a final state, and
        ``squeue`` no longer lists it, which on a loaded controller can come later.
        """
        if slurm_commands.job_info(job_id).get("JobState") in slurm_commands.ACTIVE:
            slurm_commands.cancel(job_id)

        def ended() -> bool:
            active = slurm_commands.job_info(job_id).get("JobState") in slurm_commands.ACTIVE
            return not active and not slurm_commands.queued(job_id)

        if not poll(ended, every=POLL, timeout=CANCEL_TIMEOUT):
            raise TimeoutError(
                f"SLURM job {job_id} did not end within {CANCEL_TIMEOUT:g} s of scancel"
            )
