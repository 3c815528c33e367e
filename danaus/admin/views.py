"""What `danaus top` and `danaus debug` see of a running job: plain msgspec structs.

They travel from each proc to the controller (pickled, between members of the
job) and from the controller to the tool (msgpack, decoded against these types).
"""

from __future__ import annotations

import msgspec


class ActorView(msgspec.Struct, frozen=True):
    """One member of an actor mesh, as its proc sees it now."""

    actor_id: str
    mesh_id: str
    mesh: str
    """The mesh's name (what it was spawned as)."""
    rank: int
    coords: dict[str, int]
    class_name: str
    state: str
    """An `ActorState` value: starting, running, stopping, stopped, failed."""
    mailbox: int
    """Messages waiting in its mailbox."""
    handled: int
    """Messages it has taken from its mailbox since it started."""
    running: str | None
    """The endpoint it is running now, if any."""


class FailureView(msgspec.Struct, frozen=True):
    """An actor that failed, or a proc that was lost, and why."""

    proc: str
    what: str
    """The failed actor's id, or the lost proc's id."""
    cause: str
    mesh: str | None = None
    rank: int | None = None
    seen: float = 0.0
    """When the controller first saw it (seconds since the epoch)."""


class ProcView(msgspec.Struct, frozen=True):
    """One proc: its process, its actors, and the failures it hosted."""

    proc_id: str
    host: str = ""
    pid: int | None = None
    cpu_seconds: float = 0.0
    """CPU time of the whole OS process so far."""
    rss_bytes: int = 0
    threads: int = 0
    actors: list[ActorView] = []
    failures: list[FailureView] = []
    answered: bool = True
    """False when the proc did not answer in time (paused, overloaded, or just lost)."""


class SessionView(msgspec.Struct, frozen=True):
    """A rank stopped at ``breakpoint()``, waiting for a debugger."""

    id: int
    actor_id: str
    mesh: str
    rank: int
    coords: dict[str, int]
    proc: str
    host: str
    pid: int | None
    method: str | None
    location: str
    """Where it stopped: ``file:line in function``."""


class JobView(msgspec.Struct, frozen=True, tag="job"):
    """A whole job at one moment, as the controller gathered it."""

    pid: int
    transport: str
    at: float
    """When the snapshot was taken (seconds since the epoch)."""
    gather_seconds: float
    """How long gathering it took."""
    procs: list[ProcView]
    failures: list[FailureView]
    """Every failure seen so far, newest first."""
    sessions: list[SessionView]

    def hosts(self) -> list[str]:
        """The hosts of the job, in the order their procs are listed."""
        return list(dict.fromkeys(p.host for p in self.procs if p.host))
