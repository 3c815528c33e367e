"""Message envelopes and the frame codec every transport carries.

A message is a list of frames: a header frame, then the payload frames made by
`danaus.core.serialize.dumps`. The header is ``MAGIC``, a protocol version byte
and a msgpack-encoded envelope. `decode` validates all of it and raises only
`FrameError`, so a proc can reject a bad frame, log it and keep serving.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated

import msgspec

from danaus.core.serialize import Buffer

MAGIC = b"DNS"
VERSION = 2
MAX_HEADER_BYTES = 64 * 1024
MAX_FRAMES = 1 + 1 + 4096
PLAIN_RETURNS = 1
PLAIN_PORT = 2
_KINDS_OF_METHOD = (0, PLAIN_RETURNS, PLAIN_PORT)
"""The values of `Call.plain`."""
MAX_FANOUT = 1024
"""The widest fan-out a cast may ask forwarding procs for."""
MAX_SUBTREE = 4096
"""The most procs one forwarded cast may name (its header must fit ``MAX_HEADER_BYTES`` too)."""
MAX_ACKS = 4096
"""The most hops one `Ack` may acknowledge."""

Count = Annotated[int, msgspec.Meta(ge=0)]
ProcId = Annotated[str, msgspec.Meta(min_length=1)]


class FrameError(ValueError):
    """A frame was malformed, truncated, oversized or of another protocol version."""


class PortRef(msgspec.Struct, frozen=True, array_like=True):
    """Where replies go: a port on a proc."""

    proc: str
    port: int


class Call(msgspec.Struct, tag="call", array_like=True, frozen=True, omit_defaults=True):
    """Run endpoint ``method`` of the actor ``actor`` on the receiving proc.

    ``carried`` is what instrumentation passes from caller to callee (an
    OpenTelemetry span context); absent from the frame when instrumentation is off.
    """

    actor: str
    method: str
    reply: PortRef | None
    point: int
    labels: tuple[str, ...]
    sizes: tuple[int, ...]
    sender: str
    seq: Count
    """The call's number in the sequence of calls from the sender's proc to the receiving one
    (`danaus.core.ordering`)."""
    carried: dict[str, str] | None = None
    plain: int = 0
    """0: ``method`` is an endpoint; else a plain method called through ``as_endpoint``
    (``PLAIN_RETURNS``: it answers by returning, ``PLAIN_PORT``: through a port argument)."""
    origin: ProcId | None = None
    """The proc of the sender, when another proc passed the call on (absent: the proc it
    came from)."""

    def validate(self) -> None:
        if self.plain not in _KINDS_OF_METHOD:
            raise FrameError("call: unknown kind of method")
        if len(self.labels) != len(self.sizes) or (self.sizes and min(self.sizes) < 1):
            raise FrameError("call: labels and sizes disagree")
        if not 0 <= self.point < math.prod(self.sizes):
            raise FrameError("call: point out of range")


class Cast(msgspec.Struct, tag="cast", array_like=True, frozen=True):
    """A call travelling along a cast's tree (`danaus.core.casting`).

    The receiving proc delivers ``call`` to its actor and passes it on to the
    procs ``procs`` (each at its point in ``points``, numbered ``seqs`` from
    ``origin``), split among at most ``fanout`` of them. With ``ack``, ``hop``
    names this message on its way from the proc that sent it, which keeps the
    call until an `Ack` of ``hop`` says every proc of this part of the tree
    has it; without, the caller keeps the call until every answer is in, and
    nobody acknowledges it.
    """

    call: Call
    origin: ProcId
    """The proc of the call's sender: where its answers and undeliverable returns go."""
    hop: Count
    fanout: int
    procs: Annotated[tuple[ProcId, ...], msgspec.Meta(max_length=MAX_SUBTREE)]
    points: Annotated[tuple[int, ...], msgspec.Meta(max_length=MAX_SUBTREE)]
    seqs: Annotated[tuple[Count, ...], msgspec.Meta(max_length=MAX_SUBTREE)]
    ack: bool = True

    def validate(self) -> None:
        self.call.validate()
        if not 2 <= self.fanout <= MAX_FANOUT:
            raise FrameError(f"cast: fan-out {self.fanout} outside 2..{MAX_FANOUT}")
        if not len(self.procs) == len(self.points) == len(self.seqs):
            raise FrameError("cast: procs, points and numbers disagree")
        points = self.points
        if points and (min(points) < 0 or max(points) >= math.prod(self.call.sizes)):
            raise FrameError("cast: point out of range")


class Ack(msgspec.Struct, tag="ack", array_like=True, frozen=True):
    """Every proc that the receiving proc's casts ``hops`` were for has them (or is lost)."""

    hops: Annotated[tuple[Count, ...], msgspec.Meta(max_length=MAX_ACKS)]

    def validate(self) -> None:
        pass


class Reply(msgspec.Struct, tag="reply", array_like=True, frozen=True):
    """A value (or, if ``error``, a failure) sent to port ``port`` of the receiving proc.

    ``returnable``: sent by user code through a `Port` that wants undeliverable
    values back (``Port.return_undeliverable``), rather than answered by the runtime.
    """

    port: int
    rank: int
    error: bool
    sender: str
    seq: int
    returnable: bool = False

    def validate(self) -> None:
        if self.rank < 0:
            raise FrameError("reply: negative rank")


class Fail(msgspec.Struct, tag="fail", array_like=True, frozen=True):
    """A member of a mesh owned by actor ``owner`` of the receiving proc failed (payload: why)."""

    owner: str
    sender: str
    seq: int

    def validate(self) -> None:
        pass


class Returned(msgspec.Struct, tag="returned", array_like=True, frozen=True):
    """A message the sending proc could not deliver, back to its sender (payload: why)."""

    sender: str
    """The actor id of the sender of the undeliverable message."""
    seq: int

    def validate(self) -> None:
        pass


Envelope = Call | Cast | Ack | Reply | Fail | Returned

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(Envelope)
_PREFIX = MAGIC + bytes([VERSION])
_PREFIX_BYTES = len(_PREFIX)


def encode(envelope: Envelope, payload: Sequence[Buffer]) -> list[Buffer]:
    """Frames for ``envelope`` followed by its payload frames."""
    return [_PREFIX + _encoder.encode(envelope), *payload]


def header_bytes(envelope: Envelope) -> int:
    """The size of the header frame `encode` makes for ``envelope``."""
    return _PREFIX_BYTES + len(_encoder.encode(envelope))


def decode(frames: Sequence[Buffer], max_bytes: int | None = None) -> tuple[Envelope, list[Buffer]]:
    """Validate ``frames``; return the envelope and the payload frames."""
    if not frames:
        raise FrameError("empty message")
    if len(frames) > MAX_FRAMES:
        raise FrameError(f"{len(frames)} frames exceed the limit of {MAX_FRAMES}")
    # The header is read as bytes (copied if it is not): it is small, and checking and
    # slicing bytes costs a fraction of what doing so through memoryviews does.
    header = frames[0]
    bytes_ = type(header) is bytes
    size = len(header) if bytes_ else memoryview(header).nbytes
    if size > MAX_HEADER_BYTES:
        raise FrameError(f"header of {size} bytes exceeds {MAX_HEADER_BYTES}")
    if not bytes_:
        header = bytes(header)
    if not header.startswith(_PREFIX):
        if len(header) < _PREFIX_BYTES or not header.startswith(MAGIC):
            raise FrameError("not a Danaus frame (bad magic)")
        raise FrameError(f"protocol version {header[len(MAGIC)]}, expected {VERSION}")
    try:
        envelope = _decoder.decode(header[_PREFIX_BYTES:])
    except (msgspec.MsgspecError, ValueError) as exc:
        raise FrameError(f"bad envelope: {exc}") from None
    payload = frames[1:]
    if type(payload) is not list:
        payload = list(payload)
    check(envelope, payload, max_bytes)
    return envelope, payload


def check(envelope: Envelope, payload: Sequence[Buffer], max_bytes: int | None = None) -> None:
    """Validate ``envelope`` and its ``payload``: a payload of at least one frame, and at
    most ``max_bytes`` in all. `decode` checks what it decodes so; a message that came as an
    envelope object (see `danaus.core.transport.Transport.send_message`) is checked here."""
    if not payload:
        raise FrameError("message has no payload")
    if max_bytes is not None:
        total = sum(memoryview(f).nbytes for f in payload)
        if total > max_bytes:
            raise FrameError(f"payload of {total} bytes exceeds the limit of {max_bytes}")
    envelope.validate()


@dataclass(frozen=True)
class Rejected:
    """What could be read of a call or cast that `decode` refused, so that nobody waits on it."""

    origin: str
    """The proc whose call it was."""
    seq: int | None
    """Its number from ``origin`` (None: unreadable), so that later calls are not held behind it."""
    reply: PortRef | None
    """Where its caller waits, if on ``origin`` (a rejection never goes to a third proc)."""
    points: tuple[int, ...]
    """The points the caller awaits answers for: the receiver's, then its part of the tree."""
    hop: int | None
    """The cast's hop, which its sender keeps until it is acknowledged (None: not a cast)."""


def rejected(frames: Sequence[Buffer], sender: str) -> Rejected | None:
    """Read leniently, from a header `decode` refused, what a call's sender and caller need.

    ``sender`` is the proc the frames came from: a call's origin, or the proc
    that forwarded a cast. None if the header is not a call or cast at all.
    """
    header = memoryview(frames[0]) if frames else memoryview(b"")
    if header.nbytes > MAX_HEADER_BYTES or bytes(header[:_PREFIX_BYTES]) != _PREFIX:
        return None
    try:
        raw = msgspec.msgpack.decode(header[_PREFIX_BYTES:])
    except (msgspec.MsgspecError, ValueError):
        return None
    if not isinstance(raw, list) or not raw:
        return None
    if raw[0] == "call":
        passed_on = len(raw) > 11 and isinstance(raw[11], str) and raw[11]
        call, origin, hop, subtree = raw, raw[11] if passed_on else sender, None, []
    elif raw[0] == "cast" and len(raw) >= 7 and isinstance(raw[2], str) and raw[2]:
        acknowledged = len(raw) < 8 or raw[7] is not False
        call, origin, subtree = raw[1], raw[2], raw[6]
        hop = _count(raw[3]) if acknowledged else None
    else:
        return None
    if not (isinstance(call, list) and len(call) >= 9 and call[0] == "call"):
        return Rejected(origin, None, None, (), hop)
    port, point = call[3], call[4]
    reply = None
    if isinstance(port, list) and len(port) == 2 and port[0] == origin:
        number = _count(port[1])
        reply = PortRef(origin, number) if number is not None else None
    points = [point] if _count(point) is not None else []
    if isinstance(subtree, list):
        points += [p for p in subtree[:MAX_SUBTREE] if _count(p) is not None]
    return Rejected(origin, _count(call[8]), reply, tuple(dict.fromkeys(points)), hop)


def rejected_reply(frames: Sequence[Buffer]) -> Reply | None:
    """The envelope of an answer whose payload was refused, if ``frames`` begin with one."""
    header = memoryview(frames[0]) if frames else memoryview(b"")
    if header.nbytes > MAX_HEADER_BYTES or bytes(header[:_PREFIX_BYTES]) != _PREFIX:
        return None
    try:
        envelope = _decoder.decode(header[_PREFIX_BYTES:])
    except (msgspec.MsgspecError, ValueError):
        return None
    return envelope if isinstance(envelope, Reply) and envelope.rank >= 0 else None


def _count(value: object) -> int | None:
    """``value`` if it is a non-negative int (as a count or number on the wire must be)."""
    return value if type(value) is int and value >= 0 else None
