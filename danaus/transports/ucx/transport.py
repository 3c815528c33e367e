"""A proc's endpoint on the ucx transport: control on zmq (as tcp), data over UCX.

The control plane (directory, heartbeats, launcher, authentication with the
job's CURVE key) is the tcp transport's. Core messages and RDMA transfers go
over UCX to the address each proc publishes in the directory. The Python
``ucxx`` API offers no one-sided memory access, so RDMA reads and writes are
served by the owner's UCX thread, from the registered memory, never by its
actors.
"""

from __future__ import annotations

from typing import Any

from danaus.transports.tcp.memory import MEMORY
from danaus.transports.tcp.transport import TcpTransport
from danaus.transports.ucx.plane import UcxPlane


class UcxTransport(TcpTransport):
    """TcpTransport whose data plane is UCX."""

    memory_backend = "ucx"
    memory_one_sided = False

    def _data_plane(self, bind_host: str) -> UcxPlane:
        """Core messages over UCX, served on the process's UCX thread."""
        return UcxPlane(
            self.proc_id,
            self._keys.secret,
            bind_host,
            self.limits,
            self.refusals,
            self._from_plane,
            self._lookup,
        )

    def _send_raw(self, dest: str, message: list[Any]) -> None:
        """RDMA transfers travel on UCX too."""
        if dest not in self._lost:
            self.data.send(dest, message)

    def _from_plane(self, src: str, frames: list[Any]) -> None:
        if bytes(frames[0]) == MEMORY:
            self.io.call_soon(self._memory_message, src, frames[1:])
        else:
            super()._from_plane(src, frames)
