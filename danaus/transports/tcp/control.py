"""Control messages between procs and the controller's directory.

Every zmq message starts with a one-byte kind frame: ``DATA`` for core
messages (validated by `danaus.core.wire`), ``CONTROL`` for one msgpack frame
holding one of the structs below (validated by msgspec on decode).
"""

from __future__ import annotations

from typing import Literal

import msgspec

from danaus.core.transport import ProcLoss

DATA = b"D"
CONTROL = b"C"


class Address(msgspec.Struct, frozen=True, array_like=True):
    """Where a proc receives: control messages (zmq), and data (the transport's own plane)."""

    control: str
    data: str


class Hello(msgspec.Struct, tag="hello", array_like=True):
    """A proc is up and receives at ``address``."""

    address: Address
    pid: int
    host: str


class Where(msgspec.Struct, tag="where", array_like=True):
    """Where does ``proc`` receive?"""

    proc: str


class At(msgspec.Struct, tag="at", array_like=True):
    proc: str
    address: Address


class Watch(msgspec.Struct, tag="watch", array_like=True):
    """Tell me when ``proc`` is lost."""

    proc: str


class Lost(msgspec.Struct, tag="lost", array_like=True):
    proc: str
    reason: str
    host: str | None
    pid: int | None
    exit_code: int | None
    signal: int | None
    stopped: bool = False

    @classmethod
    def of(cls, loss: ProcLoss) -> Lost:
        return cls(
            loss.proc, loss.reason, loss.host, loss.pid, loss.exit_code, loss.signal, loss.stopped
        )

    def loss(self) -> ProcLoss:
        return ProcLoss(
            self.proc, self.reason, self.host, self.pid, self.exit_code, self.signal, self.stopped
        )


class Unreachable(msgspec.Struct, tag="unreachable", array_like=True):
    """My ``link`` (a data connection, a queue pair) with ``proc`` broke, for ``reason``:
    messages on it may be lost, so one of us must be declared lost (the controller decides)."""

    proc: str
    link: str
    reason: str


class Ping(msgspec.Struct, tag="ping", array_like=True):
    seq: int


class Pong(msgspec.Struct, tag="pong", array_like=True):
    seq: int


class Exit(msgspec.Struct, tag="exit", array_like=True):
    """End this proc: its actors were stopped already."""


class Hosting(msgspec.Struct, tag="hosting", array_like=True):
    """Host agent ``agent`` is asked to start ``procs``: they are lost if it is."""

    agent: str
    procs: list[str]


class Exited(msgspec.Struct, tag="exited", array_like=True):
    """A host agent's report to the directory: a proc it started is gone."""

    loss: Lost


class Signal(msgspec.Struct, tag="signal", array_like=True):
    """To a host agent: send signal ``signal`` to ``proc``, one of the procs it started."""

    proc: str
    signal: int


class Check(msgspec.Struct, tag="check", array_like=True):
    """To a host agent: does ``proc``, one of the procs it started, still run?"""

    proc: str


ProcessState = Literal["runs", "ending", "halted"]
"""What a launcher sees of a proc's process: it runs (and uses CPU), it is ending (it was asked
to exit), or it is halted: paused, gone, or wedged with every thread asleep."""


class Running(msgspec.Struct, tag="running", array_like=True):
    """A host agent's answer to `Check`."""

    proc: str
    state: ProcessState


class Output(msgspec.Struct, tag="output", array_like=True):
    """Lines a proc on another host wrote to its stdout (``stream`` 1) or stderr (2)."""

    stream: int
    text: str


Control = (
    Hello
    | Where
    | At
    | Watch
    | Lost
    | Unreachable
    | Ping
    | Pong
    | Exit
    | Hosting
    | Exited
    | Signal
    | Check
    | Running
    | Output
)

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(Control)


def encode(message: Control) -> list[bytes]:
    return [CONTROL, _encoder.encode(message)]


def decode(frame: bytes | memoryview) -> Control:
    """Raise ``ValueError`` for anything that is not a valid control message."""
    try:
        return _decoder.decode(frame)
    except (msgspec.MsgspecError, ValueError) as exc:
        raise ValueError(f"bad control message: {exc}") from None
