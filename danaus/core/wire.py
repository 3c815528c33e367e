"""Message envelopes and the frame codec every transport carries.

A message is a list of frames: a header frame, then the payload frames made by
`danaus.core.serialize.dumps`. The header is ``MAGIC``, a protocol version byte
and a msgpack-encoded envelope. `decode` validates all of it and raises only
`FrameError`, so a proc can reject a bad frame, log it and keep serving.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import msgspec

from danaus.core.serialize import Buffer

MAGIC = b"DNS"
VERSION = 1
MAX_HEADER_BYTES = 64 * 1024
MAX_FRAMES = 1 + 1 + 4096
PLAIN_RETURNS = 1
PLAIN_PORT = 2


class FrameError(ValueError):
    """A frame was malformed, truncated, oversized or of another protocol version."""


class PortRef(msgspec.Struct, frozen=True, array_like=True):
    """Where replies go: a port on a proc."""

    proc: str
    port: int


class Call(msgspec.Struct, tag="call", array_like=True, omit_defaults=True):
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
    seq: int
    carried: dict[str, str] | None = None
    plain: int = 0
    """0: ``method`` is an endpoint; else a plain method called through ``as_endpoint``
    (``PLAIN_RETURNS``: it answers by returning, ``PLAIN_PORT``: through a port argument)."""

    def validate(self) -> None:
        if self.plain not in (0, PLAIN_RETURNS, PLAIN_PORT):
            raise FrameError("call: unknown kind of method")
        if len(self.labels) != len(self.sizes) or (self.sizes and min(self.sizes) < 1):
            raise FrameError("call: labels and sizes disagree")
        if not 0 <= self.point < math.prod(self.sizes):
            raise FrameError("call: point out of range")


class Reply(msgspec.Struct, tag="reply", array_like=True):
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


class Fail(msgspec.Struct, tag="fail", array_like=True):
    """A member of a mesh owned by actor ``owner`` of the receiving proc failed (payload: why)."""

    owner: str
    sender: str
    seq: int

    def validate(self) -> None:
        pass


class Returned(msgspec.Struct, tag="returned", array_like=True):
    """A message the sending proc could not deliver, back to its sender (payload: why)."""

    sender: str
    """The actor id of the sender of the undeliverable message."""
    seq: int

    def validate(self) -> None:
        pass


Envelope = Call | Reply | Fail | Returned

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(Envelope)
_PREFIX = MAGIC + bytes([VERSION])


def encode(envelope: Envelope, payload: Sequence[Buffer]) -> list[Buffer]:
    """Frames for ``envelope`` followed by its payload frames."""
    return [_PREFIX + _encoder.encode(envelope), *payload]


def decode(frames: Sequence[Buffer], max_bytes: int | None = None) -> tuple[Envelope, list[Buffer]]:
    """Validate ``frames``; return the envelope and the payload frames."""
    if not frames:
        raise FrameError("empty message")
    if len(frames) > MAX_FRAMES:
        raise FrameError(f"{len(frames)} frames exceed the limit of {MAX_FRAMES}")
    header = memoryview(frames[0])
    if header.nbytes > MAX_HEADER_BYTES:
        raise FrameError(f"header of {header.nbytes} bytes exceeds {MAX_HEADER_BYTES}")
    if header[: len(_PREFIX)] != _PREFIX:
        if header.nbytes < len(_PREFIX) or bytes(header[: len(MAGIC)]) != MAGIC:
            raise FrameError("not a Danaus frame (bad magic)")
        raise FrameError(f"protocol version {header[len(MAGIC)]}, expected {VERSION}")
    payload = list(frames[1:])
    if not payload:
        raise FrameError("message has no payload")
    if max_bytes is not None:
        total = sum(memoryview(f).nbytes for f in payload)
        if total > max_bytes:
            raise FrameError(f"payload of {total} bytes exceeds the limit of {max_bytes}")
    try:
        envelope = _decoder.decode(header[len(_PREFIX) :])
    except (msgspec.MsgspecError, ValueError) as exc:
        raise FrameError(f"bad envelope: {exc}") from None
    envelope.validate()
    return envelope, payload


def reply_port(frames: Sequence[Buffer], sender: str) -> tuple[PortRef, int] | None:
    """Where the sender of a rejected call waits for its answer, if the header says so.

    Read leniently from a header `decode` refused, so that the sender hears why
    instead of waiting forever: a call's reply port and point, when the port is
    on ``sender`` itself (a rejection never goes to a third proc).
    """
    header = memoryview(frames[0]) if frames else memoryview(b"")
    if header.nbytes > MAX_HEADER_BYTES or bytes(header[: len(_PREFIX)]) != _PREFIX:
        return None
    try:
        raw = msgspec.msgpack.decode(header[len(_PREFIX) :])
    except (msgspec.MsgspecError, ValueError):
        return None
    if not (isinstance(raw, list) and len(raw) >= 5 and raw[0] == "call"):
        return None
    port, point = raw[3], raw[4]
    if (
        isinstance(port, list)
        and len(port) == 2
        and port[0] == sender
        and type(port[1]) is int
        and type(point) is int
    ):
        return PortRef(sender, port[1]), point
    return None
