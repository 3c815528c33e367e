"""A proc's endpoint on the ucx transport: control on zmq (as tcp), data over UCX.

The control plane (directory, heartbeats, launcher, authentication with the
job's CURVE key) is the tcp transport's. Core messages travel on tcp's stream
plane when small and over UCX when large (`danaus.transports.ucx.split`).
`RDMABuffer` transfers are one-sided (`danaus.transports.ucx.rma`): the owner
registers its memory with UCP, and readers and writers move the bytes with UCP
get and put, with no Python running in the owner. Where the one-sided library
cannot be built or loaded, transfers fall back to tcp's `MemoryService`,
served by the owner's transport thread, and the fallback warning says why.

A proc starts UCX only once it needs it: for its first large message (either
way), and for its first RDMA registration or transfer. A proc that does
neither never pays UCX's start, threads or teardown.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from typing import TYPE_CHECKING, Any

from danaus.core import config
from danaus.core.blocking import discard_outcome
from danaus.core.transport import Memory, MemoryHandle, ProcLoss, memory_owner_lost
from danaus.transports.tcp.ioloop import Settle, settler
from danaus.transports.tcp.memory import Drop, decode
from danaus.transports.tcp.transport import TcpTransport
from danaus.transports.ucx import rma
from danaus.transports.ucx.devices import restrict_to
from danaus.transports.ucx.fabric import bulk_routes
from danaus.transports.ucx.split import SplitPlane

if TYPE_CHECKING:
    from danaus.transports.ucx.plane import UcxPlane

log = logging.getLogger("danaus.ucx")

ABORT_WAIT = 5.0
"""Seconds a transfer given up on waits for UCX to stop it, so that no byte of it lands later."""


class UcxTransport(TcpTransport):
    """TcpTransport whose data plane is UCX, with one-sided RDMA where the library is at hand."""

    memory_backend = "ucx"
    data: SplitPlane

    def __init__(self, *args: Any, bind_host: str, **kwargs: Any) -> None:
        restrict_to(bind_host)  # now: UCX and the one-sided worker start later, on demand
        self._bulk_routes = bulk_routes(config.setting("ucx_bulk"), os.environ)
        self._bind_host = bind_host
        self._memory_lock = threading.Lock()
        self._memory_ready = False
        self._one_sided: rma.OneSidedMemory | None = None
        self._fallback_reason = ""
        super().__init__(*args, bind_host=bind_host, **kwargs)

    def _data_plane(self, bind_host: str) -> SplitPlane:
        """Small messages on tcp's stream plane, large ones over UCX (see `SplitPlane`)."""

        def start_large() -> UcxPlane:
            from danaus.transports.ucx.plane import UcxPlane

            return UcxPlane(
                self.proc_id,
                self._keys.secret,
                bind_host,
                self.limits,
                self.refusals,
                lambda src, frames: split.arrived(src, frames),
                lambda src, frames, reason: split.refused(src, frames, reason),
                lambda peer, reason: self.report_unreachable(peer, "UCX connection", reason),
            )

        small = self._stream_plane(
            bind_host,
            lambda src, frames: split.arrived_on_loop(src, frames),
            lambda src, frames, reason: split.refused_on_loop(src, frames, reason),
        )
        split = SplitPlane(
            self.proc_id,
            small,
            start_large,
            self.loop,
            self._from_plane,
            self._refused_on_plane,
            self._bulk_routes,
        )
        return split

    @property
    def one_sided(self) -> rma.OneSidedMemory | None:
        """This proc's one-sided registrations (started now if not yet), or None."""
        with self._memory_lock:
            if not self._memory_ready:
                self._memory_ready = True
                self._one_sided, self._fallback_reason = rma.available(
                    self.proc_id, self.io, self._bind_host
                )
                if self._one_sided is None:
                    log.warning("proc %s: %s", self.proc_id, self._fallback_reason)
            return self._one_sided

    @property
    def memory_one_sided(self) -> bool:  # type: ignore[override]
        return self.one_sided is not None

    @property
    def memory_devices(self) -> frozenset[str]:  # type: ignore[override]
        one_sided = self.one_sided
        return one_sided.devices if one_sided is not None else frozenset({"cpu"})

    @property
    def memory_fallback_reason(self) -> str:  # type: ignore[override]
        return "" if self.one_sided is not None else self._fallback_reason

    def _started_one_sided(self) -> rma.OneSidedMemory | None:
        """The one-sided registrations if they were ever started (never starts them)."""
        with self._memory_lock:
            return self._one_sided

    def register(self, buffer: Memory) -> MemoryHandle:
        if self.one_sided is None:
            return super().register(buffer)
        return self.one_sided.register(buffer)

    def unregister(self, handle: MemoryHandle) -> None:
        if self.one_sided is not None and handle.owner == self.proc_id:
            self.one_sided.unregister(handle.key)  # at once: transfers checking from now on fail
        else:
            super().unregister(handle)  # a served registration, or a Drop sent to the owner

    async def read(self, handle: MemoryHandle, offset: int, dst: Memory) -> None:
        if isinstance(handle, rma.UcxMemoryHandle):
            await self._one_sided_op(handle, offset, dst, write=False)
        else:
            await super().read(handle, offset, dst)

    async def write(self, handle: MemoryHandle, offset: int, src: Memory) -> None:
        if isinstance(handle, rma.UcxMemoryHandle):
            await self._one_sided_op(handle, offset, src, write=True)
        else:
            await super().write(handle, offset, src)

    async def _one_sided_op(
        self, handle: rma.UcxMemoryHandle, offset: int, local: Memory, write: bool
    ) -> None:
        if self.one_sided is None:
            raise RuntimeError(
                f"{rma.describe(handle)} is registered for one-sided UCX transfers, which this "
                f"process cannot make: {self.memory_fallback_reason}"
            )
        token = self.one_sided.token()
        future: asyncio.Future[None] = self.loop.create_future()
        self.io.call_soon(
            self._start_one_sided, token, handle, offset, local, write, settler(self.loop, future)
        )
        try:
            await asyncio.shield(future)
        except asyncio.CancelledError:
            # Given up (a timeout): stop the transfer, and wait until UCX no longer touches
            # `local`, so that nothing of it lands there after the caller has moved on.
            self.io.call_soon(self.one_sided.abort, token)
            future.add_done_callback(discard_outcome)  # its "given up" is this cancellation
            _, late = await asyncio.wait({future}, timeout=ABORT_WAIT)
            if late:
                log.warning(
                    "proc %s: a transfer of %s given up on did not stop within %.0f s",
                    self.proc_id,
                    rma.describe(handle),
                    ABORT_WAIT,
                )
            raise

    def _start_one_sided(
        self,
        token: int,
        handle: rma.UcxMemoryHandle,
        offset: int,
        local: Memory,
        write: bool,
        settle: Settle,
    ) -> None:
        assert self.one_sided is not None
        loss = self.peers.lost.get(handle.owner)
        if loss is not None:
            settle(memory_owner_lost(loss))
        else:
            self.one_sided.start(token, handle, offset, local, write, settle)

    def _memory_message(self, src: str, frames: list[Any]) -> None:
        """A peer dropped one of this proc's one-sided buffers; the rest is served as on tcp."""
        one_sided = self._started_one_sided()
        if one_sided is not None and frames:
            try:
                message = decode(frames[0])
            except ValueError as exc:
                log.error("proc %s: rejected a memory message from %s: %s", self.proc_id, src, exc)
                return
            if isinstance(message, Drop):
                one_sided.unregister(message.key)
                return
        super()._memory_message(src, frames)

    def _peer_lost(self, loss: ProcLoss) -> None:
        known = loss.proc in self.peers.lost
        super()._peer_lost(loss)
        one_sided = self._started_one_sided()
        if not known and one_sided is not None:
            one_sided.lost(loss)

    def close(self) -> None:
        super().close()
        one_sided = self._started_one_sided()
        if one_sided is not None:
            self.io.call_soon(one_sided.close)
