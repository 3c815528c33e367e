"""The admin protocol: what `danaus top`, `danaus debug` and the dashboard ask a controller.

Requests and answers are msgpack, decoded against these types only: nothing a
tool sends is unpickled. Each message is one frame.
"""

from __future__ import annotations

from typing import TypeVar

import msgspec

from danaus.admin.views import (
    JobView,
    LogsView,
    ProfileView,
    SessionView,
    StacksView,
    TraceView,
)
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


class Stacks(msgspec.Struct, frozen=True, tag="stacks"):
    """The Python stack of every thread of ``proc`` now (`StacksView`)."""

    proc: str


class Profile(msgspec.Struct, frozen=True, tag="profile"):
    """Samples of ``proc``'s stacks for ``seconds``, ``hz`` a second (`ProfileView`)."""

    proc: str
    seconds: float
    hz: float


class Logs(msgspec.Struct, frozen=True, tag="logs"):
    """The lines procs printed after line number ``after`` (`LogsView`)."""

    after: int


class Trace(msgspec.Struct, frozen=True, tag="trace"):
    """The job's trace so far (`TraceView`)."""


Request = Snapshot | ListSessions | ReadSession | SendLine | Stacks | Profile | Logs | Trace


class Sessions(msgspec.Struct, frozen=True, tag="session-list"):
    sessions: list[SessionView]


class Refused(msgspec.Struct, frozen=True, tag="refused"):
    """The request could not be served, and why."""

    reason: str


Answer = (
    JobView | Sessions | DebugOutput | StacksView | ProfileView | LogsView | TraceView | Refused
)

A = TypeVar("A")


class RequestRefused(Exception):
    """The controller refused a request (`Refused`), or answered it with something unexpected."""


def expect(answer: Answer, kind: type[A]) -> A:
    """``answer`` if it is a ``kind``; else `RequestRefused` with the controller's reason."""
    if isinstance(answer, kind):
        return answer
    if isinstance(answer, Refused):
        raise RequestRefused(answer.reason)
    raise RequestRefused(f"expected {kind.__name__}, got {type(answer).__name__}")


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
