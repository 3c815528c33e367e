"""A run's trace: every send, delivery, spawn, stop and fault, in order, as typed events.

On the simulator the trace is the proof of determinism: the same program and
seed give the same trace byte for byte, so its digest identifies a run. Each
kind of event is a class of its own; checkers and exporters match on the
class, and the JSON form names it in ``kind``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec


class Event(msgspec.Struct, tag_field="kind", kw_only=True, gc=False):
    """Something that happened at time ``t`` (the world's clock) on proc ``proc``.

    Events hold plain values and never take part in a reference cycle, so the
    garbage collector does not track them (``gc=False``): a trace keeps every
    event, and each one the collector tracked would count toward its next
    young collection, which walks every tracked object made since the last (on
    the simulator, one every other broadcast to 10,000 procs, for nothing).
    """

    t: float = 0.0
    proc: str

    @property
    def kind(self) -> str:
        """The event's kind, as its JSON form names it (``send-call``, ``fail``...)."""
        return self.__struct_config__.tag  # type: ignore[return-value]

    def fields(self) -> dict[str, Any]:
        """The event's own fields (all but ``t`` and ``proc``), in declaration order."""
        return {name: getattr(self, name) for name in self.__struct_fields__ if name not in _BASE}


_BASE = frozenset(Event.__struct_fields__)


class Boot(Event, tag="boot"):
    """A proc started on ``host``."""

    host: str


class Down(Event, tag="down"):
    """A proc is gone (as the network or launcher saw it)."""

    reason: str


class Pause(Event, tag="pause"):
    """A proc stopped answering (SIGSTOP, or its simulation)."""


class Resume(Event, tag="resume"):
    """A paused proc runs again."""


class Lost(Event, tag="lost"):
    """``proc`` learned that ``peer`` is gone."""

    peer: str
    reason: str


class Spawn(Event, tag="spawn"):
    """Member ``rank`` of mesh ``mesh`` started as ``actor``; ``owner`` is the owner's proc."""

    actor: str
    mesh: str
    rank: int
    owner: str
    creator: str | None


class Stop(Event, tag="stop"):
    """An actor stopped gracefully."""

    actor: str


class Fail(Event, tag="fail"):
    """An actor failed."""

    actor: str
    cause: str


class Sent(Event):
    """A message left ``proc`` for ``dst``; (``src``, ``seq``) names it (``src`` is an actor)."""

    src: str
    seq: int
    dst: str


class CallSent(Sent, tag="send-call"):
    actor: str
    method: str
    bytes: int


class ReplySent(Sent, tag="send-reply"):
    port: int
    error: bool
    bytes: int


class FailureSent(Sent, tag="send-failure"):
    failure: str
    """The key of the owner the failure report goes to."""


class Received(Event):
    """A message (``src``, ``seq``) reached ``proc``."""

    src: str
    seq: int


class CallReceived(Received, tag="recv-call"):
    """A call was handed on to its actor: in order, once, however it travelled."""

    actor: str


class ReplyReceived(Received, tag="recv-reply"):
    port: int


class FailureReceived(Received, tag="recv-failure"):
    failure: str


def message_key(event: Sent | Received) -> tuple[bool, str, int, str]:
    """What names a message: whether it is a call, its sender actor, its number, its proc.

    Calls are numbered per pair of procs (`danaus.core.ordering`), other
    messages per sending actor, so a call and a reply may share a number.
    """
    dst = event.dst if isinstance(event, Sent) else event.proc
    return isinstance(event, (CallSent, CallReceived)), event.src, event.seq, dst


class Forwarded(Event, tag="forward-call"):
    """``proc`` passed call (``src``, ``seq``) on to ``to``, for ``procs`` procs (``to``'s part
    of the tree, ``to`` included); ``hop`` names it until ``to`` acknowledges it (None: its
    caller keeps it until every answer is in, and nobody acknowledges it)."""

    src: str
    seq: int
    to: str
    hop: int | None
    procs: int


class Adopted(Event, tag="adopt"):
    """``proc`` lost ``lost`` before it passed ``hops`` calls on (before it acknowledged them,
    or before the procs below it answered): it sends them to those procs itself."""

    lost: str
    hops: int


class CallDropped(Event, tag="drop-call"):
    """Call (``src``, ``seq``) reached ``proc`` but was not handed on: ``why``."""

    src: str
    seq: int
    why: str


class Failure(Event, tag="failure"):
    """The owner's proc learned that member ``rank`` of ``mesh`` failed."""

    mesh: str
    rank: int
    cause: str


class Release(Event, tag="release"):
    """An owner stopped watching ``mesh`` (it is being stopped)."""

    mesh: str


class Restart(Event, tag="restart"):
    """Members ``ranks`` of ``mesh`` were restarted."""

    mesh: str
    ranks: list[int]


class Unhandled(Event, tag="unhandled"):
    """A failure reached the root and went to the unhandled-fault hook."""

    mesh: str
    cause: str


class FaultApplied(Event, tag="fault"):
    fault: str


class FaultHealed(Event, tag="heal"):
    fault: str


class FaultSkipped(Event, tag="fault-skipped"):
    fault: str
    why: str


class HistoryRecorded(Event, tag="history", gc=True):
    """An event of a chaos scenario's history (its ``event`` kind and its fields).

    Tracked by the garbage collector: its fields are a scenario's own values.
    """

    event: str
    data: dict[str, Any]


FAULT_EVENTS = (FaultApplied, FaultHealed, FaultSkipped)
"""The events a nemesis records: they concern the whole cluster, not one proc."""

ANY_EVENT = (
    Boot
    | Down
    | Pause
    | Resume
    | Lost
    | Spawn
    | Stop
    | Fail
    | CallSent
    | ReplySent
    | FailureSent
    | CallReceived
    | ReplyReceived
    | FailureReceived
    | Forwarded
    | Adopted
    | CallDropped
    | Failure
    | Release
    | Restart
    | Unhandled
    | FaultApplied
    | FaultHealed
    | FaultSkipped
    | HistoryRecorded
)
"""Every kind of event, for decoding a written trace."""

_encoder = msgspec.json.Encoder(enc_hook=str)


class Trace:
    """An append-only list of events stamped with the world's clock.

    Where ``enabled`` is false (real transports, unless asked), nothing is kept.
    Callers on hot paths test ``enabled``, then append to ``events`` an event
    built with ``t=clock()`` themselves: `record` stamps an event after it is
    built, and that call and the stamp cost about as much as building it.
    """

    def __init__(self, clock: Callable[[], float], enabled: bool = True) -> None:
        self.clock = clock
        """The world's clock, which stamps each event."""
        self.enabled = enabled
        self.events: list[Event] = []

    def record(self, event: Event) -> None:
        if self.enabled:
            event.t = self.clock()
            self.events.append(event)

    def lines(self) -> Iterator[str]:
        """The events as JSON lines."""
        for event in self.events:
            yield _encoder.encode(event).decode()

    def digest(self) -> str:
        """SHA-256 of the JSON lines: equal digests mean identical runs."""
        h = hashlib.sha256()
        for event in self.events:
            h.update(_encoder.encode(event))
            h.update(b"\n")
        return h.hexdigest()

    def write(self, path: str | Path) -> None:
        """Write the trace as JSON lines."""
        with open(path, "w") as f:
            for line in self.lines():
                f.write(line)
                f.write("\n")

    def __len__(self) -> int:
        return len(self.events)


def read(path: str | Path) -> list[Event]:
    """The events of a trace written by `Trace.write`."""
    decoder = msgspec.json.Decoder(ANY_EVENT)
    with open(path, "rb") as f:
        return [decoder.decode(line) for line in f if line.strip()]
