"""The admin protocol: what `danaus top` and `danaus debug` ask a job's controller, and answers.

Requests and answers are msgpack, decoded against these types only: nothing a
tool sends is unpickled. Each message is one frame.
"""

from __future__ import annotations

import msgspec

from danaus.admin.views import JobView, SessionView
from danaus.debug.sessions import DebugOutput


class Snapshot(msgspec.Struct, frozen=True, tag="snapshot"):
    """The whole job now (`JobView`)."""


class ListSessions(msgspec.Struct, frozen=True, tag="sessions"):
    """The ranks stopped at ``breakpoint()`` (`Sessions`)."""


class ReadSession(msgspec.Struct, frozen=True, tag="read"):
    """What a stopped rank's pdb printed (`DebugOutput`); waits while the rank runs."""

    session: int


class SendLine(msgspec.Struct, frozen=True, tag="send"):
    """Type a line at a stopped rank's prompt; what it prints next (`DebugOutput`)."""

    session: int
    line: str


Request = Snapshot | ListSessions | ReadSession | SendLine


class Sessions(msgspec.Struct, frozen=True, tag="session-list"):
    sessions: list[SessionView]


class Refused(msgspec.Struct, frozen=True, tag="refused"):
    """The request could not be served, and why."""

    reason: str


Answer = JobView | Sessions | DebugOutput | Refused

_encoder = msgspec.msgpack.Encoder()
_requests = msgspec.msgpack.Decoder(Request)
_answers = msgspec.msgpack.Decoder(Answer)


def encode(message: Request | Answer) -> bytes:
    return _encoder.encode(message)


def decode_request(data: bytes | memoryview) -> Request:
    """A request, or `ValueError` if ``data`` is not one."""
    try:
        return _requests.decode(data)
    except (msgspec.MsgspecError, ValueError) as exc:
        raise ValueError(f"bad admin request: {exc}") from None


def decode_answer(data: bytes | memoryview) -> Answer:
    try:
        return _answers.decode(data)
    except (msgspec.MsgspecError, ValueError) as exc:
        raise ValueError(f"bad admin answer: {exc}") from None
