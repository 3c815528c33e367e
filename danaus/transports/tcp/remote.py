"""A host agent on another host than its controller: what its launcher reports goes by message.

The controller's own launcher registers its children with the directory
directly and copies their output to the controller's terminal. A host agent
that a worker loop started does the same through control messages to the
controller: it learns that a child registered by asking the directory where
the child receives (answered once the child has said hello), reports a
child's end with `Exited`, and sends its children's output, line by line, as
`Output`, which the controller writes to its own stdout or stderr.
"""

from __future__ import annotations

from collections.abc import Callable

from danaus.core.transport import ROOT, ProcLoss
from danaus.transports.tcp import control
from danaus.transports.tcp.transport import TcpTransport


class RemoteRegistry:
    """The launcher's registry of a host agent on another host (I/O thread)."""

    def __init__(self, transport: TcpTransport) -> None:
        self._transport = transport
        self._waiting: dict[str, Callable[[], None]] = {}
        transport.on_resolved = self._resolved

    def expect(self, proc: str, on_hello: Callable[[], None]) -> None:
        self._waiting[proc] = on_hello
        self._transport.find(proc)

    def lost(self, loss: ProcLoss) -> None:
        self._waiting.pop(loss.proc, None)
        self._transport.send_control(ROOT, control.Exited(control.Lost.of(loss)))

    def _resolved(self, proc: str) -> None:
        on_hello = self._waiting.pop(proc, None)
        if on_hello is not None:
            on_hello()


def forward_output(transport: TcpTransport) -> Callable[[int, str], None]:
    """An output for a launcher that sends its children's lines to the controller (I/O thread)."""

    def output(stream: int, text: str) -> None:
        transport.send_control(ROOT, control.Output(stream, text))

    return output
