"""A job: hosts that a scheduler runs workers on, named as meshes, for a controller to attach to.

Every kind of job does the same three things: `Job.apply` starts what it needs
(an allocation, a worker on each host), `Job.state` attaches this controller
to the workers and names them as host meshes, and `Job.kill` ends every worker
and allocation. A job keeps what it started in a small state file in its
directory, so another process (``danaus job state``, ``danaus job kill``)
finds it with `load`. The job's key is made by the job and kept in a file of
that directory that only its owner can read.
"""

from __future__ import annotations

import json
import os
from abc import ABC, abstractmethod
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from danaus.core import config
from danaus.core.attach import attach_to_workers
from danaus.core.mesh import HostMesh
from danaus.job.state import JobState
from danaus.transports.tcp import jobkey

DEFAULT_DIRECTORY = Path(".danaus") / "job"
"""Where a job keeps its state, key and logs unless given ``directory``."""
STATE_FILE = "job.json"
KEY_FILE = "job.key"


class JobNotApplied(RuntimeError):
    """The job has not been applied (or has been killed): there are no workers to attach to."""


class SchedulerMissing(RuntimeError):
    """What the job runs on (SLURM's commands, the ``kubernetes`` package) is not available here."""


class Job(ABC):
    """Hosts for one program, named as meshes: ``{"trainers": 4, "generators": 2}``.

    ``meshes`` maps each mesh's name (a Python identifier) to its number of
    hosts. ``directory`` is where the job keeps its state file, key and logs
    (default ``.danaus/job``); for a job on other machines it must be on a file
    system they share.
    """

    kind: ClassVar[str]
    _kinds: ClassVar[dict[str, type[Job]]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "kind" in cls.__dict__:
            Job._kinds[cls.kind] = cls

    def __init__(
        self, meshes: Mapping[str, int], *, directory: str | os.PathLike[str] | None = None
    ) -> None:
        self.meshes = validate_meshes(meshes)
        self.directory = Path(directory if directory is not None else DEFAULT_DIRECTORY).absolute()
        self.running: dict[str, Any] = {}
        self._state: tuple[object, JobState] | None = None

    @property
    def key_file(self) -> Path:
        """The file holding the job's key (mode 600)."""
        return self.directory / KEY_FILE

    def apply(self) -> None:
        """Start what the job needs, once: applying a job that runs already does nothing."""
        if self.running:
            if self.is_running():
                return
            self.stop()
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._new_key()
        self.running = self.start()
        self.save()

    def state(self) -> JobState:
        """This controller attached to the job's workers: each mesh's hosts, by name.

        ``state().trainers`` is a `HostMesh` of the ``trainers`` hosts, with
        dimension ``hosts``. Asking again in the same controller returns the
        same meshes. The controller must listen on an address the workers
        reach (``configure(bind_host=...)`` when they are on other hosts).
        """
        if not self.running:
            raise JobNotApplied(
                f"the job in {self.directory} has not been applied (or was killed): "
                "call apply() first, or `danaus job apply`"
            )
        world = config.current_world()
        if self._state is not None and self._state[0] is world:
            return self._state[1]
        addresses = self.addresses()
        key = self.key_file
        meshes: dict[str, HostMesh] = {
            name: attach_to_workers(workers=addresses[name], key=key, name=name)
            for name in self.meshes
        }
        state = JobState(meshes)
        self._state = (world, state)
        return state

    def kill(self) -> None:
        """End every worker and allocation of the job; its state file and key go too."""
        if self.running:
            self.stop()
        self.running = {}
        self._state = None
        for name in (STATE_FILE, KEY_FILE):
            (self.directory / name).unlink(missing_ok=True)

    def save(self) -> None:
        """Write the job's state file (what it is and what it started)."""
        record = {"kind": self.kind, "config": self.config(), "running": self.running}
        partial = self.directory / (STATE_FILE + ".partial")
        partial.write_text(json.dumps(record, indent=1) + "\n")
        partial.replace(self.directory / STATE_FILE)

    @abstractmethod
    def start(self) -> dict[str, Any]:
        """Start the workers (the key file exists); what must be kept to find and stop them."""

    @abstractmethod
    def addresses(self) -> dict[str, list[str]]:
        """Each mesh's workers' addresses, in order."""

    @abstractmethod
    def stop(self) -> None:
        """End everything `start` started, and return once it has ended."""

    @abstractmethod
    def is_running(self) -> bool:
        """Whether what `start` started still runs."""

    @abstractmethod
    def config(self) -> dict[str, Any]:
        """The constructor's arguments, as JSON, to make this job again."""

    def _new_key(self) -> None:
        self.key_file.unlink(missing_ok=True)
        jobkey.write(self.key_file)


def validate_meshes(meshes: Mapping[str, int]) -> dict[str, int]:
    """The meshes, checked: identifiers naming positive numbers of hosts."""
    if not isinstance(meshes, Mapping) or not meshes:
        raise ValueError(f"a job needs meshes, e.g. {{'trainers': 2}}, not {meshes!r}")
    for name, hosts in meshes.items():
        if not isinstance(name, str) or not name.isidentifier() or name.startswith("_"):
            raise ValueError(f"a mesh's name must be a Python identifier, not {name!r}")
        if isinstance(hosts, bool) or not isinstance(hosts, int) or hosts < 1:
            raise ValueError(f"mesh {name!r} needs a positive number of hosts, not {hosts!r}")
    return dict(meshes)


def load(directory: str | os.PathLike[str] | None = None) -> Job:
    """The job whose state file is in ``directory`` (default ``.danaus/job``)."""
    directory = Path(directory if directory is not None else DEFAULT_DIRECTORY).absolute()
    path = directory / STATE_FILE
    try:
        record = json.loads(path.read_text())
    except FileNotFoundError:
        raise JobNotApplied(f"no job in {directory} (no {STATE_FILE}): apply one first") from None
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read the job's state file {path}: {exc}") from None
    kind = Job._kinds.get(record.get("kind"))
    if kind is None:
        raise ValueError(f"{path} names an unknown kind of job: {record.get('kind')!r}")
    job = kind(**record["config"], directory=directory)
    job.running = record["running"]
    return job
