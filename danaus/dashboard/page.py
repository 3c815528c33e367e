"""What the dashboard's page draws, computed from a job's snapshots: the topology and failures.

`PageModel` turns each `JobView` into a `PageState`: hosts, the proc meshes
with procs on each host, and the actor meshes on those procs with each
member's state, mailbox depth and message rate (from `TopModel`, which keeps
the snapshot before), plus every failure with its whole report. States:

- a proc is ``running`` (it answered), ``lost`` (it did not answer in time),
  ``failed`` (killed, crashed, or declared dead) or ``stopped`` (exited cleanly);
- an actor has its own state (``starting``, ``running``, ``stopping``,
  ``stopped``, ``failed``), or ``lost`` while its proc does not answer.

Each failed proc or actor carries the key of its failure (``proc|what``), so
that the page links the two ways. Procs of a proc mesh that ended cleanly,
with nothing failed in it, are left out while anything runs: the topology is
what runs now and what broke (and, once nothing runs, how it all ended).
"""

from __future__ import annotations

import re
from collections import Counter

import msgspec

from danaus.admin.model import MiB, TopModel
from danaus.admin.views import ActorView, EndedView, FailureView, JobView, ProcView, SessionView


class ActorCell(msgspec.Struct, frozen=True):
    actor: str
    rank: int
    coords: dict[str, int]
    proc: str
    state: str
    mailbox: int
    rate: float
    """Messages handled per second."""
    running: str
    """The endpoint it runs now."""
    failure: str | None
    """The key of its failure, if it failed."""


class ActorMeshNode(msgspec.Struct, frozen=True):
    id: str
    name: str
    class_name: str
    dims: list[str]
    members: list[ActorCell]
    states: dict[str, int]


class ProcCell(msgspec.Struct, frozen=True):
    id: str
    index: int
    pid: int | None
    state: str
    cpu_percent: float
    rss_mib: float
    threads: int
    mailbox: int
    rate: float
    failure: str | None


class ProcMeshNode(msgspec.Struct, frozen=True):
    id: str
    procs: list[ProcCell]
    actor_meshes: list[ActorMeshNode]


class HostNode(msgspec.Struct, frozen=True):
    host: str
    cpu_percent: float
    rss_mib: float
    states: dict[str, int]
    """How many of its procs are in each state."""
    proc_meshes: list[ProcMeshNode]


class FailureItem(msgspec.Struct, frozen=True):
    key: str
    kind: str
    """``actor`` or ``proc``."""
    proc: str
    what: str
    mesh: str | None
    rank: int | None
    coords: dict[str, int]
    cause: str
    report: str
    age_s: float


class Totals(msgspec.Struct, frozen=True):
    hosts: int
    procs: int
    actors: int
    rate: float
    failures: int
    not_answering: int


class PageState(msgspec.Struct, frozen=True):
    """Everything the page draws from one snapshot."""

    pid: int
    transport: str
    at: float
    gather_ms: float
    totals: Totals
    hosts: list[HostNode]
    failures: list[FailureItem]
    sessions: list[SessionView]


def natural(text: str) -> tuple[object, ...]:
    """A sort key that orders ``root:2.10`` after ``root:2.9``."""
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text))


def proc_mesh_of(proc: str) -> str:
    """The proc mesh a proc id belongs to (``root:1`` for ``root:1.3``; the controller's own)."""
    mesh, dot, index = proc.rpartition(".")
    return mesh if dot and index.isdigit() else proc


def _index(proc: str) -> int:
    _, dot, index = proc.rpartition(".")
    return int(index) if dot and index.isdigit() else 0


def failure_key(failure: FailureView) -> str:
    return f"{failure.proc}|{failure.what}"


class _Member(msgspec.Struct):
    """An actor mesh member while the state is built: where it is and what it is."""

    cell: ActorCell
    host: str
    mesh_id: str
    mesh_name: str
    class_name: str


class PageModel:
    """The page's state from the latest snapshot (rates from the one before)."""

    def __init__(self) -> None:
        self.top = TopModel()

    def update(self, view: JobView) -> PageState:
        """Take ``view`` and return what the page draws."""
        self.top.update(view)
        failures = {failure_key(f): f for f in reversed(view.failures)}
        proc_failure = {f.what: key for key, f in failures.items() if f.what == f.proc}
        actor_failure = {f.what: key for key, f in failures.items() if f.what != f.proc}
        hosts: dict[str, str] = {}
        procs: list[tuple[str, ProcCell]] = []
        members: list[_Member] = []
        for proc in view.procs:
            hosts[proc.proc_id] = proc.host or "unknown host"
            procs.append((hosts[proc.proc_id], self._proc_cell(proc)))
            state = None if proc.answered else "lost"
            for actor in proc.actors:
                members.append(self._member(actor, proc, hosts[proc.proc_id], state, actor_failure))
        for ended in view.ended:
            hosts.setdefault(ended.proc_id, ended.host or "unknown host")
            procs.append((hosts[ended.proc_id], _ended_cell(ended, proc_failure)))
        live_ranks = {(m.mesh_id, m.cell.rank) for m in members}
        for key, failure in failures.items():
            if failure.what == failure.proc or failure.mesh is None or failure.rank is None:
                continue
            mesh_id = failure.what.rpartition("/")[0]
            if (mesh_id, failure.rank) in live_ranks:
                continue  # restarted: the new member stands where it failed
            host = hosts.get(failure.proc, "unknown host")
            members.append(_failed_member(failure, key, host))
        failed_meshes = {proc_mesh_of(c.id) for _, c in procs if c.state == "failed"}
        if view.procs:
            procs = [
                (host, cell)
                for host, cell in procs
                if cell.state != "stopped" or proc_mesh_of(cell.id) in failed_meshes
            ]
        return PageState(
            pid=view.pid,
            transport=view.transport,
            at=view.at,
            gather_ms=round(view.gather_seconds * 1000, 1),
            totals=Totals(
                hosts=len({h for h, c in procs if c.state in ("running", "lost")}),
                procs=sum(1 for p in view.procs if p.answered),
                actors=sum(len(p.actors) for p in view.procs),
                rate=round(sum(c.rate for _, c in procs), 1),
                failures=len(view.failures),
                not_answering=sum(1 for p in view.procs if not p.answered),
            ),
            hosts=_hosts(view, procs, members),
            failures=[_failure_item(view, key, f) for key, f in reversed(failures.items())],
            sessions=list(view.sessions),
        )

    def _proc_cell(self, proc: ProcView) -> ProcCell:
        return ProcCell(
            id=proc.proc_id,
            index=_index(proc.proc_id),
            pid=proc.pid,
            state="running" if proc.answered else "lost",
            cpu_percent=round(self.top.cpu_percent(proc), 1),
            rss_mib=round(proc.rss_bytes / MiB, 1),
            threads=proc.threads,
            mailbox=sum(a.mailbox for a in proc.actors),
            rate=round(sum(self.top.actor_rate(a) for a in proc.actors), 1),
            failure=None,
        )

    def _member(
        self,
        actor: ActorView,
        proc: ProcView,
        host: str,
        state: str | None,
        failures: dict[str, str],
    ) -> _Member:
        cell = ActorCell(
            actor=actor.actor_id,
            rank=actor.rank,
            coords=dict(actor.coords),
            proc=proc.proc_id,
            state=state or actor.state,
            mailbox=actor.mailbox,
            rate=round(self.top.actor_rate(actor), 1),
            running=actor.running or "",
            failure=failures.get(actor.actor_id),
        )
        return _Member(cell, host, actor.mesh_id, actor.mesh, actor.class_name)


def _ended_cell(ended: EndedView, failures: dict[str, str]) -> ProcCell:
    return ProcCell(
        id=ended.proc_id,
        index=_index(ended.proc_id),
        pid=ended.pid,
        state=ended.state,
        cpu_percent=0.0,
        rss_mib=0.0,
        threads=0,
        mailbox=0,
        rate=0.0,
        failure=failures.get(ended.proc_id),
    )


def _failed_member(failure: FailureView, key: str, host: str) -> _Member:
    assert failure.mesh is not None and failure.rank is not None
    cell = ActorCell(
        actor=failure.what,
        rank=failure.rank,
        coords=dict(failure.coords),
        proc=failure.proc,
        state="failed",
        mailbox=0,
        rate=0.0,
        running="",
        failure=key,
    )
    class_name = (failure.actor_class or "").rpartition(".")[2]
    return _Member(cell, host, failure.what.rpartition("/")[0], failure.mesh, class_name)


def _failure_item(view: JobView, key: str, failure: FailureView) -> FailureItem:
    return FailureItem(
        key=key,
        kind="proc" if failure.what == failure.proc else "actor",
        proc=failure.proc,
        what=failure.what,
        mesh=failure.mesh,
        rank=failure.rank,
        coords=dict(failure.coords),
        cause=failure.cause,
        report=failure.report or failure.cause,
        age_s=round(max(0.0, view.at - failure.seen), 1),
    )


def _hosts(
    view: JobView, procs: list[tuple[str, ProcCell]], members: list[_Member]
) -> list[HostNode]:
    """The tree: each host's proc meshes (its procs there), each with its actor meshes."""
    order = [*view.hosts(), *(host for host, _ in procs)]
    hosts = []
    for host in sorted(dict.fromkeys(order), key=order.index):
        cells = [cell for h, cell in procs if h == host]
        if not cells:
            continue
        meshes = []
        for mesh_id in sorted({proc_mesh_of(c.id) for c in cells}, key=natural):
            mine = [c for c in cells if proc_mesh_of(c.id) == mesh_id]
            mine.sort(key=lambda c: c.index)
            here = {c.id for c in mine}
            actors = [m for m in members if m.host == host and m.cell.proc in here]
            meshes.append(ProcMeshNode(mesh_id, mine, _actor_meshes(actors)))
        live = [c for c in cells if c.state == "running"]
        hosts.append(
            HostNode(
                host=host,
                cpu_percent=round(sum(c.cpu_percent for c in live), 1),
                rss_mib=round(sum(c.rss_mib for c in live), 1),
                states=dict(Counter(c.state for c in cells)),
                proc_meshes=meshes,
            )
        )
    return hosts


def _actor_meshes(members: list[_Member]) -> list[ActorMeshNode]:
    by_mesh: dict[str, list[_Member]] = {}
    for member in members:
        by_mesh.setdefault(member.mesh_id, []).append(member)
    nodes = []
    for mesh_id in sorted(by_mesh, key=natural):
        group = sorted(by_mesh[mesh_id], key=lambda m: m.cell.rank)
        cells = [m.cell for m in group]
        nodes.append(
            ActorMeshNode(
                id=mesh_id,
                name=group[0].mesh_name,
                class_name=next((m.class_name for m in group if m.class_name), ""),
                dims=list(next((c.coords for c in cells if c.coords), {})),
                members=cells,
                states=dict(Counter(c.state for c in cells)),
            )
        )
    return nodes
