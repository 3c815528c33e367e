"""Checkers: what must hold after any run, whatever the faults.

* `delivery`: between procs, messages arrive in send order (FIFO), at most
  once, never out of nowhere, and none is lost while both ends stay up. A
  call counts as arrived when it is handed on to its actor, in order, however
  it travelled (straight, or along a cast's tree).
* `reported_once`: each failed member of a supervised mesh is reported to its
  owner exactly once (per incarnation: a restart starts a new one), unless the
  owner is gone or stopped watching.
* `liveness`: once faults have healed and the cluster has settled, no call is
  still waiting for an answer.
* `waits_on_failed`: no call is still waiting on an actor that failed (it must
  have ended with an error).
* `survivors`: every actor that neither failed nor stopped still answers.

The first two read only the trace, so they work on any transport that traces.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from danaus.core import trace as ev
from danaus.core.actor import Actor, endpoints_of
from danaus.core.agent_refs import agent_of
from danaus.core.endpoint import Endpoint
from danaus.core.errors import MeshStoppedError, SupervisionError
from danaus.core.placement import Placement
from danaus.core.runtime import Runtime
from danaus.core.shape import Shape


@dataclass(frozen=True)
class Violation:
    """A broken rule: which checker found it, and what it saw."""

    checker: str
    message: str

    def __str__(self) -> str:
        return f"[{self.checker}] {self.message}"


def _downs(events: Sequence[ev.Event]) -> dict[str, float]:
    """When each proc was first known to be gone."""
    down: dict[str, float] = {}
    for e in events:
        if isinstance(e, ev.Down):
            down.setdefault(e.proc, e.t)
        elif isinstance(e, ev.Lost):
            down.setdefault(e.peer, e.t)
    return down


def delivery(events: Sequence[ev.Event]) -> list[Violation]:
    """FIFO and exactly-once delivery between procs, from the trace.

    Calls and other messages are numbered apart (`ev.message_key`), so each
    has its own order between a sender and a proc.
    """
    down = _downs(events)
    known_senders = {e.src for e in events if isinstance(e, ev.Sent)}
    sends: dict[tuple[bool, str, int, str], tuple[float, str]] = {}
    received: dict[tuple[bool, str, int, str], int] = defaultdict(int)
    last_seq: dict[tuple[bool, str, str], int] = {}
    found: list[Violation] = []
    for e in events:
        if isinstance(e, ev.Sent):
            sends[ev.message_key(e)] = (e.t, e.proc)
        elif isinstance(e, ev.Received):
            key = ev.message_key(e)
            received[key] += 1
            if received[key] == 2:
                found.append(Violation("delivery", f"{_name(key)} delivered twice"))
            if key not in sends and e.src in known_senders:
                found.append(Violation("delivery", f"{_name(key)} delivered but never sent"))
            pair = (key[0], e.src, e.proc)
            previous = last_seq.get(pair)
            if previous is not None and e.seq < previous:
                what = "call" if key[0] else "message"
                found.append(
                    Violation(
                        "delivery",
                        f"{e.src} -> {e.proc}: {what} seq {e.seq} arrived after seq {previous}",
                    )
                )
            last_seq[pair] = e.seq if previous is None else max(previous, e.seq)
    for key, (_, sender) in sends.items():
        if not received.get(key) and key[3] not in down and sender not in down:
            found.append(Violation("delivery", f"{_name(key)} sent but never delivered"))
    return found


def _name(key: tuple[bool, str, int, str]) -> str:
    call, src, seq, proc = key
    return f"{'call' if call else 'message'} {(src, seq, proc)}"


_SUPERVISION_EVENTS = (
    ev.Spawn,
    ev.Stop,
    ev.Fail,
    ev.Down,
    ev.Lost,
    ev.Release,
    ev.Failure,
    ev.Restart,
)
"""The events `reported_once` reads."""


def reported_once(events: Sequence[ev.Event]) -> list[Violation]:
    """Each failed member reported to its owner once per incarnation, from the trace."""
    members: dict[str, tuple[str, int]] = {}
    where: dict[tuple[str, int], str] = {}
    creator: dict[str, tuple[str, str]] = {}
    alive: set[tuple[str, int]] = set()
    released: set[str] = set()
    expected: dict[tuple[str, int], str] = {}
    reports: dict[tuple[str, int], int] = defaultdict(int)
    gone_actors: set[str] = set()
    gone_procs: set[str] = set()
    found: list[Violation] = []

    def owner_gone(mesh: str) -> bool:
        owner_proc, owner_actor = creator.get(mesh, ("", ""))
        return owner_proc in gone_procs or owner_actor in gone_actors or mesh in released

    def member_failed(member: tuple[str, int], why: str) -> None:
        if member in alive:
            alive.discard(member)
            if not owner_gone(member[0]):
                expected.setdefault(member, why)

    def proc_gone(proc: str, reason: str) -> None:
        gone_procs.add(proc)
        for member in [m for m in alive if where.get(m) == proc]:
            member_failed(member, f"proc {proc} {reason}")

    for e in events:
        if not isinstance(e, _SUPERVISION_EVENTS):
            continue  # a message: one check rather than one per case below
        match e:
            case ev.Spawn():
                member = (e.mesh, e.rank)
                members[e.actor] = member
                where[member] = e.proc
                creator[e.mesh] = (e.owner, e.creator or "")
                alive.add(member)
            case ev.Stop():
                gone_actors.add(e.actor)
                alive.discard(members.get(e.actor, ("", -1)))
            case ev.Fail():
                gone_actors.add(e.actor)
                if e.actor in members:
                    member_failed(members[e.actor], e.cause)
            case ev.Down():
                proc_gone(e.proc, e.reason)
            case ev.Lost():
                proc_gone(e.peer, e.reason)
            case ev.Release():
                released.add(e.mesh)
            case ev.Failure():
                member = (e.mesh, e.rank)
                reports[member] += 1
                if reports[member] == 2:
                    found.append(Violation("reported_once", f"member {member} reported twice"))
            case ev.Restart():
                for rank in e.ranks:
                    reports.pop((e.mesh, rank), None)
                    expected.pop((e.mesh, rank), None)
    for member, why in expected.items():
        if not reports.get(member) and not owner_gone(member[0]):
            found.append(Violation("reported_once", f"member {member} failed ({why}) unreported"))
    return found


def liveness(runtimes: Iterable[Runtime]) -> list[Violation]:
    """Calls still waiting for answers (after faults healed and the cluster settled)."""
    found = []
    for runtime in runtimes:
        for waiting in runtime.unanswered_calls():
            found.append(
                Violation("liveness", f"a call from {runtime.proc_id} still waits on {waiting}")
            )
    return found


def waits_on_failed(runtimes: Iterable[Runtime], events: Sequence[ev.Event]) -> list[Violation]:
    """Calls still waiting on an actor that failed: they should have ended with an error."""
    failed = {(e.proc, e.actor.rsplit("/", 1)[0]): e for e in events if isinstance(e, ev.Fail)}
    found = []
    for runtime in runtimes:
        for wait in runtime.waits():
            for target in wait.targets:
                failure = failed.get(target)
                if failure is not None:
                    found.append(
                        Violation(
                            "waits_on_failed",
                            f"{wait.waiter.actor_id}'s call of {wait.method} still waits on "
                            f"{failure.actor}, which failed at {failure.t:.6f} s: {failure.cause}",
                        )
                    )
    return found


async def survivors(procs: Iterable[str], timeout: float) -> list[Violation]:
    """Every running user actor on ``procs`` answers a probe within ``timeout`` seconds."""
    probe_spec = endpoints_of(Actor)["__initialized__"]
    found = []
    for proc in procs:
        try:
            actors = await asyncio.wait_for(agent_of(proc).actors.call_one(), timeout)
        except (SupervisionError, MeshStoppedError):
            continue
        except asyncio.TimeoutError:
            found.append(Violation("survivors", f"proc {proc} did not answer within {timeout} s"))
            continue
        for mesh_id, name, rank in actors:
            member = Placement(mesh_id, name, (proc,), Shape.unity())
            try:
                await asyncio.wait_for(Endpoint(member, probe_spec).call_one(), timeout)
            except (SupervisionError, MeshStoppedError):
                continue
            except asyncio.TimeoutError:
                found.append(
                    Violation(
                        "survivors", f"{name}[{rank}] on {proc} did not answer in {timeout} s"
                    )
                )
    return found
