"""`LocalJob`: a job whose hosts are worker processes on this machine.

Each host of each mesh is a ``danaus worker`` listening on a free loopback
port, started in a session of its own so that it outlives the process that
applied the job. The workers read the job's key from its file (mode 600),
named by ``DANAUS_JOB_KEY_FILE``. A way to try a multi-host program, and the
job system's tests, on one machine.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from danaus.core.settings import variable
from danaus.job import processes
from danaus.job.base import Job

START_TIMEOUT = 60.0
"""Seconds a worker may take to listen."""


class LocalJob(Job):
    """Meshes of ``danaus worker`` processes on this machine: ``LocalJob({"trainers": 2})``."""

    kind = "local"

    def config(self) -> dict[str, Any]:
        return {"meshes": self.meshes}

    def start(self) -> dict[str, Any]:
        for folder in ("workers", "logs"):
            (self.directory / folder).mkdir(exist_ok=True)
        env = {**os.environ, variable("job_key_file"): str(self.key_file)}
        env.pop(variable("job_key"), None)
        started: dict[str, list[dict[str, Any]]] = {}
        try:
            for mesh, count in self.meshes.items():
                for index in range(count):
                    name = f"{mesh}{index}"
                    address = self._address_file(name)
                    address.unlink(missing_ok=True)
                    argv = [sys.executable, "-m", "danaus.cli", "worker", "--listen",
                            "127.0.0.1:0", "--name", name, "--address-file", str(address)]
                    worker = processes.start(argv, env=env, log=self._log(name))
                    started.setdefault(mesh, []).append(worker)
            for mesh, workers in started.items():
                for index, worker in enumerate(workers):
                    worker["address"] = self._wait_listening(f"{mesh}{index}", worker)
        except BaseException:
            processes.end([w for ws in started.values() for w in ws])
            raise
        return {"workers": started}

    def addresses(self) -> dict[str, list[str]]:
        workers = self.running["workers"]
        return {mesh: [w["address"] for w in workers[mesh]] for mesh in self.meshes}

    def stop(self) -> None:
        processes.end(self._workers())

    def is_running(self) -> bool:
        return all(processes.alive(worker) for worker in self._workers())

    def _workers(self) -> list[dict[str, Any]]:
        return [w for ws in self.running.get("workers", {}).values() for w in ws]

    def _address_file(self, name: str) -> Path:
        return self.directory / "workers" / name

    def _log(self, name: str) -> Path:
        return self.directory / "logs" / f"{name}.log"

    def _wait_listening(self, name: str, worker: dict[str, Any]) -> str:
        def failed() -> str | None:
            if processes.alive(worker):
                return None
            return f"worker {name} exited before listening:\n{processes.log_tail(self._log(name))}"

        return processes.wait_for_file(self._address_file(name), START_TIMEOUT, failed)
