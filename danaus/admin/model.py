"""What `danaus top` shows, computed from successive snapshots of a job, without a terminal.

A `JobView` holds counters (messages handled, CPU seconds); rates need two of
them. `TopModel` keeps the previous snapshot and turns the latest into rows:
hosts, procs, meshes, actors, failures and stopped ranks.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from danaus.admin.views import ActorView, JobView, ProcView, SessionView
from danaus.wording import counted

MiB = 2**20


@dataclass(frozen=True)
class HostRow:
    host: str
    procs: int
    actors: int
    cpu_percent: float
    rss_mib: float


@dataclass(frozen=True)
class ProcRow:
    proc: str
    host: str
    pid: int | None
    cpu_percent: float
    rss_mib: float
    actors: int
    mailbox: int
    messages_per_s: float
    answered: bool


@dataclass(frozen=True)
class MeshRow:
    mesh: str
    mesh_id: str
    class_name: str
    members: int
    states: str
    """How many members are in each state: ``running 3, failed 1``."""
    mailbox: int
    rate: float
    """Messages per second its members handle."""


@dataclass(frozen=True)
class ActorRow:
    actor: str
    mesh: str
    rank: str
    proc: str
    state: str
    mailbox: int
    messages_per_s: float
    running: str


@dataclass(frozen=True)
class FailureRow:
    age_s: float
    proc: str
    what: str
    cause: str


def _coords(actor: ActorView | SessionView) -> str:
    return ",".join(f"{k}={v}" for k, v in actor.coords.items()) or str(actor.rank)


class TopModel:
    """The rows of `danaus top`, from the latest snapshot and the one before it."""

    def __init__(self) -> None:
        self.view: JobView | None = None
        self._previous: JobView | None = None
        self._procs: dict[str, ProcView] = {}
        self._handled: dict[str, int] = {}

    def update(self, view: JobView) -> None:
        """Take a new snapshot; rates are measured since the one before."""
        if self.view is not None:
            self._previous = self.view
            self._procs = {p.proc_id: p for p in self.view.procs if p.answered}
            self._handled = {a.actor_id: a.handled for p in self.view.procs for a in p.actors}
        self.view = view

    def _elapsed(self) -> float:
        if self.view is None or self._previous is None:
            return 0.0
        return self.view.at - self._previous.at

    def actor_rate(self, actor: ActorView) -> float:
        """Messages per second ``actor`` handled since the previous snapshot (0 at first)."""
        elapsed = self._elapsed()
        before = self._handled.get(actor.actor_id)
        if elapsed <= 0 or before is None:
            return 0.0
        return max(0, actor.handled - before) / elapsed

    def cpu_percent(self, proc: ProcView) -> float:
        """The CPU ``proc``'s process used since the previous snapshot, in % of one core."""
        elapsed = self._elapsed()
        before = self._procs.get(proc.proc_id)
        if elapsed <= 0 or before is None or not proc.answered:
            return 0.0
        return max(0.0, proc.cpu_seconds - before.cpu_seconds) / elapsed * 100

    def procs(self) -> list[ProcRow]:
        if self.view is None:
            return []
        return [
            ProcRow(
                proc=p.proc_id,
                host=p.host,
                pid=p.pid,
                cpu_percent=self.cpu_percent(p),
                rss_mib=p.rss_bytes / MiB,
                actors=len(p.actors),
                mailbox=sum(a.mailbox for a in p.actors),
                messages_per_s=sum(self.actor_rate(a) for a in p.actors),
                answered=p.answered,
            )
            for p in self.view.procs
        ]

    def hosts(self) -> list[HostRow]:
        rows: dict[str, list[ProcRow]] = {}
        for row in self.procs():
            if row.answered:
                rows.setdefault(row.host, []).append(row)
        return [
            HostRow(
                host=host,
                procs=len(procs),
                actors=sum(p.actors for p in procs),
                cpu_percent=sum(p.cpu_percent for p in procs),
                rss_mib=sum(p.rss_mib for p in procs),
            )
            for host, procs in rows.items()
        ]

    def actors(self) -> list[ActorRow]:
        if self.view is None:
            return []
        return [
            ActorRow(
                actor=a.actor_id,
                mesh=a.mesh,
                rank=_coords(a),
                proc=p.proc_id,
                state=a.state,
                mailbox=a.mailbox,
                messages_per_s=self.actor_rate(a),
                running=a.running or "",
            )
            for p in self.view.procs
            for a in sorted(p.actors, key=lambda a: (a.mesh_id, a.rank))
        ]

    def meshes(self) -> list[MeshRow]:
        """Each actor mesh with members here: their states (failed members included), load."""
        if self.view is None:
            return []
        members: dict[str, list[ActorView]] = {}
        names: dict[str, str] = {}
        failed: Counter[str] = Counter()
        for p in self.view.procs:
            for a in p.actors:
                members.setdefault(a.mesh_id, []).append(a)
                names[a.mesh_id] = a.mesh
        # A failed member is listed by its own proc and by its owner's: count each one once,
        # while a proc still lists it (until a restart replaces it).
        current = {(f.proc, f.what): f for p in self.view.procs for f in p.failures}
        for f in current.values():
            if f.mesh is not None:
                mesh_id = f.what.rpartition("/")[0]
                failed[mesh_id] += 1
                names.setdefault(mesh_id, f.mesh)
        rows = []
        for mesh_id, name in names.items():
            actors = members.get(mesh_id, [])
            states = Counter(a.state for a in actors)
            if failed[mesh_id]:
                states["failed"] += failed[mesh_id]
            rows.append(
                MeshRow(
                    mesh=name,
                    mesh_id=mesh_id,
                    class_name=actors[0].class_name if actors else "",
                    members=len(actors) + failed[mesh_id],
                    states=", ".join(f"{state} {n}" for state, n in sorted(states.items())),
                    mailbox=sum(a.mailbox for a in actors),
                    rate=sum(self.actor_rate(a) for a in actors),
                )
            )
        return rows

    def failures(self) -> list[FailureRow]:
        if self.view is None:
            return []
        return [
            FailureRow(self.view.at - f.seen, f.proc, f.what, f.cause) for f in self.view.failures
        ]

    def sessions(self) -> list[SessionView]:
        return list(self.view.sessions) if self.view is not None else []

    def summary(self) -> str:
        """One line: the job, its size, its throughput, and what needs attention."""
        if self.view is None:
            return "waiting for the job's first snapshot..."
        view = self.view
        procs = self.procs()
        silent = sum(1 for p in procs if not p.answered)
        parts = [
            f"job pid {view.pid} ({view.transport})",
            counted(len(view.hosts()), "host"),
            counted(len(procs), "proc"),
            counted(sum(p.actors for p in procs), "actor"),
            f"{sum(p.messages_per_s for p in procs):.0f} msg/s",
            counted(len(view.failures), "failure"),
        ]
        if silent:
            parts.append(f"{silent} not answering")
        if view.sessions:
            parts.append(f"{len(view.sessions)} stopped at breakpoint() (danaus debug)")
        parts.append(f"gathered in {view.gather_seconds * 1000:.0f} ms")
        return " | ".join(parts)
