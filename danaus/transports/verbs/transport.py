"""A proc's endpoint on the verbs transport: tcp's control plane, data on RC queue pairs.

The control plane (directory, heartbeats, launcher, authentication with the
job's CURVE key) is the tcp transport's. Core messages go over the verbs plane
(`danaus.transports.verbs.plane`), and `RDMABuffer` transfers are RDMA READs
and WRITEs served by the owner's NIC. tcp's memory kind on the control
sockets carries no transfers here: it carries the verbs set-up messages
(`danaus.transports.verbs.setup`), only ever between members of the job.

A queue pair that fails (an error state, a request that exceeded its
retries) makes its peer unreachable: this proc stops talking to it at once,
and the controller decides who is lost, as for any data link that breaks
(`danaus.transports.tcp.directory.Directory.unreachable`): the proc whose
queue pair failed first is believed, and the other end is declared lost and
killed, except that the controller itself is never the one lost (a worker
whose queue pair with the controller fails is). The loss reaches every proc
that watches the lost one, and the owner of its mesh, as any loss does.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from danaus.core import config
from danaus.core.rdma import Memory
from danaus.core.transport import ROOT, MemoryHandle, ProcLoss, memory_owner_lost
from danaus.transports.tcp.ioloop import settler
from danaus.transports.tcp.memory import MEMORY
from danaus.transports.tcp.transport import TcpTransport
from danaus.transports.verbs import providers, setup
from danaus.transports.verbs.device import Timeouts
from danaus.transports.verbs.memory import Operation, VerbsHandle
from danaus.transports.verbs.plane import VerbsPlane
from danaus.transports.verbs.registrations import Registrations

log = logging.getLogger("danaus.verbs")


class VerbsTransport(TcpTransport):
    """TcpTransport whose data plane is verbs (reliable-connected queue pairs)."""

    memory_backend = "verbs"
    memory_one_sided = True
    data: VerbsPlane

    def _data_plane(self, bind_host: str) -> VerbsPlane:
        """Open the device this process's settings name (`danaus.transports.verbs.providers`)."""
        settings = config.settings()
        device = providers.open_device(settings)
        self.memory_devices = device.memory_kinds
        registrations = Registrations(
            device, settings.verbs_cache_bytes, providers.gpu_registrar(settings)
        )
        return VerbsPlane(
            self.proc_id,
            self.io,
            device,
            registrations,
            Timeouts(settings.verbs_timeout, settings.verbs_retry_count),
            self.limits,
            self._from_plane,
            self._send_setup,
            self._unreachable,
            self._refused_on_plane,
        )

    def register(self, buffer: Memory) -> MemoryHandle:
        return self.data.buffers.register(buffer)

    def unregister(self, handle: MemoryHandle) -> None:
        if handle.owner == self.proc_id:
            self.data.buffers.unregister(handle.key)
        else:
            self.io.call_soon(self._send_setup, handle.owner, setup.Drop(handle.key))

    async def _memory_op(
        self, handle: MemoryHandle, offset: int, view: memoryview, write: bool
    ) -> None:
        """Run one transfer; if it is given up, stop it before returning."""
        if not isinstance(handle, VerbsHandle):
            raise ValueError(f"{handle.backend} memory cannot be reached from the verbs transport")
        future: asyncio.Future[None] = self.loop.create_future()
        operation = Operation(handle, offset, view, write, settler(self.loop, future))
        self.io.call_soon(self._begin, operation)
        try:
            await future
        except asyncio.CancelledError:
            stopped: asyncio.Future[None] = self.loop.create_future()
            self.io.call_soon(self._abort, operation, settler(self.loop, stopped))
            await stopped
            raise

    def _begin(self, operation: Operation) -> None:
        owner = operation.handle.owner
        if owner == self.proc_id:
            try:
                self.data.buffers.copy(
                    operation.handle, operation.offset, operation.memory, operation.write
                )
            except Exception as exc:
                operation.settle(exc)
            else:
                operation.settle(None)
        elif owner in self.peers.lost:
            operation.settle(memory_owner_lost(self.peers.lost[owner]))
        else:
            self.data.start_operation(operation)

    def _abort(self, operation: Operation, stopped: Callable[[BaseException | None], None]) -> None:
        self.data.abort(operation)
        stopped(None)

    def _send_setup(self, dest: str, message: setup.Setup) -> None:
        self._send_raw(dest, [MEMORY, setup.encode(message)])

    def _memory_message(self, src: str, frames: list[Any]) -> None:
        """A verbs set-up message from member ``src``."""
        try:
            message = setup.decode(frames[0])
        except (ValueError, IndexError) as exc:
            log.error(
                "proc %s: rejected a verbs set-up message from %s: %s", self.proc_id, src, exc
            )
            return
        self.data.handle(src, message)

    def _unreachable(self, peer: str, reason: str) -> None:
        """This proc's queue pair to ``peer`` failed: a worker stops talking to it at once;
        the controller decides which of the two is lost."""
        self.report_unreachable(peer, "queue pair", reason)
        if ROOT not in (peer, self.proc_id):
            self._peer_lost(ProcLoss(peer, f"is unreachable over its queue pair: {reason}"))

    def _peer_lost(self, loss: ProcLoss) -> None:
        if loss.proc not in self.peers.lost:
            self.data.lost(loss)
        super()._peer_lost(loss)
