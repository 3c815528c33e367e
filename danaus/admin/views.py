"""What `danaus top` and `danaus debug` see of a running job: plain msgspec structs.

They travel from each proc to the controller (pickled, between members of the
job) and from the controller to the tool (msgpack, decoded against these types).
"""

from __future__ import annotations

import msgspec

from danaus.core.trace import ANY_EVENT


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
    coords: dict[str, int] = {}
    """The failed member's coordinates in its mesh (empty for a lost proc)."""
    report: str = ""
    """The whole account: the chain of failures with each cause and remote traceback."""
    actor_class: str | None = None
    """The failed actor's class (module and qualified name), where known."""


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


class EndedView(msgspec.Struct, frozen=True):
    """A proc that is gone: ``failed`` (killed, crashed, silent) or ``stopped`` (exited cleanly)."""

    proc_id: str
    host: str | None
    pid: int | None
    state: str
    reason: str


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
    ended: list[EndedView] = []
    """The procs that are gone, in the order the controller learned it (the newest last)."""

    def hosts(self) -> list[str]:
        """The hosts of the job, in the order their procs are listed."""
        return list(dict.fromkeys(p.host for p in self.procs if p.host))


class FrameView(msgspec.Struct, frozen=True, array_like=True):
    """One frame of a Python stack."""

    function: str
    file: str
    line: int
    code: str
    """The source line, where the file can be read."""


class ThreadView(msgspec.Struct, frozen=True):
    """One thread of a proc and its Python stack, the outermost frame first."""

    ident: int
    name: str
    daemon: bool
    frames: list[FrameView]


class StacksView(msgspec.Struct, frozen=True, tag="stacks"):
    """Every thread of a proc at one moment."""

    proc: str
    pid: int | None
    threads: list[ThreadView]
    taken_seconds: float
    """How long the proc took to walk its threads' frames."""


class ProfileView(msgspec.Struct, frozen=True, tag="profile"):
    """Samples of a proc's stacks over a while: how often each stack was seen.

    ``stacks`` maps a folded stack (``thread;outer;...;inner``, each frame as
    ``function (file:line)``) to its count: the input of a flame graph.
    """

    proc: str
    pid: int | None
    seconds: float
    interval: float
    samples: int
    stacks: dict[str, int]


class LogLine(msgspec.Struct, frozen=True, array_like=True):
    """A line a proc printed, as it reached the controller (with its ``[mesh coords]`` prefix)."""

    seq: int
    at: float
    """When the controller received it (seconds since the epoch)."""
    stream: int
    """1 for standard output, 2 for standard error."""
    text: str


class LogsView(msgspec.Struct, frozen=True, tag="logs"):
    """The lines after those a tool has, the newest last."""

    lines: list[LogLine]
    newest: int
    """The number of the newest line printed so far (0: none)."""
    skipped: int
    """Lines between the tool's last and the first here that are no longer kept."""


class TraceView(msgspec.Struct, frozen=True, tag="trace"):
    """The job's trace so far, from every live proc, in time order (empty unless recorded)."""

    recording: bool
    """Whether the job records its trace (``trace=`` in ``configure``, ``danaus run --trace``)."""
    events: list[ANY_EVENT]
