"""A proc's endpoint: a zmq control plane on the I/O thread, a data plane beside it.

The control plane is one authenticated ROUTER in and a DEALER per peer out,
served on the I/O thread: directory lookups, heartbeats and loss notices, none
of which user code can hold up. Its refused handshakes are logged
(`danaus.transports.tcp.handshakes`). Core messages travel on the data plane
(`StreamPlane` here: TCP connections written by the sending thread and read by
the runtime loop's thread; UCX for large messages on the ucx transport; RDMA
queue pairs on verbs), and so do the chunks of RDMA transfers served by the
I/O thread, so a bulk transfer never delays a heartbeat.

Peers are found through the controller's directory: a proc asks where a peer
receives, and what it sends waits in its `Peers` until the answer comes, for
both planes. Peers that are lost are reported by the directory to every proc
that watches them.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import zmq

from danaus.core.errors import MessageTooLargeError
from danaus.core.serialize import Buffer
from danaus.core.settings import Limits
from danaus.core.transport import (
    ROOT,
    FrameHandler,
    LossHandler,
    MemoryHandle,
    MessageHandler,
    ProcLoss,
    RefusalHandler,
    Transport,
    memory_owner_lost,
)
from danaus.transports.frames import copy_frames
from danaus.transports.tcp import control
from danaus.transports.tcp.control import CONTROL, DATA
from danaus.transports.tcp.handshakes import HandshakeMonitor
from danaus.transports.tcp.ioloop import IoLoop, Settle, settler
from danaus.transports.tcp.memory import MEMORY, MemoryService
from danaus.transports.tcp.peers import Peers
from danaus.transports.tcp.plane import DataPlane
from danaus.transports.tcp.refusals import RefusalLog
from danaus.transports.tcp.security import JobKeys
from danaus.transports.tcp.sockets import RECV_BATCH, bind_router, connect_dealer, sender
from danaus.transports.tcp.streams import StreamPlane

if TYPE_CHECKING:
    from danaus.transports.tcp.directory import Directory

log = logging.getLogger("danaus.tcp")


class TcpTransport(Transport):
    """The zmq endpoint of one proc (one per OS process)."""

    memory_backend = "tcp"
    memory_one_sided = False

    def __init__(
        self,
        proc_id: str,
        host: str,
        io: IoLoop,
        context: zmq.Context,
        keys: JobKeys,
        loop: asyncio.AbstractEventLoop,
        *,
        bind_host: str,
        limits: Limits,
        refusals: RefusalLog,
        controller_address: str | None = None,
    ) -> None:
        self.proc_id = proc_id
        self.host = host
        self.io = io
        self.loop = loop
        self._context = context
        self._keys = keys
        self.limits = limits
        self.refusals = refusals
        self.router = bind_router(self._context, keys, bind_host, limits)
        self._monitor = HandshakeMonitor(self.router, self.io, refusals, f"proc {proc_id}")
        self.directory: Directory | None = None
        self.on_control: Callable[[str, control.Control], None] | None = None
        """Control messages for the world: the directory's, the host agent's, a proc's."""
        self.on_resolved: Callable[[str], None] | None = None
        """Called (I/O thread) when the directory tells where a proc receives."""
        self._dealers: dict[str, zmq.Socket] = {}
        self._controller = controller_address
        self.peers = Peers()
        """Where each peer receives, what waits for that, and which are lost: both planes'."""
        self._on_frames: FrameHandler | None = None
        self._on_loss: LossHandler | None = None
        self._on_refused: RefusalHandler | None = None
        self.memory = MemoryService(
            proc_id, self._send_memory, self.memory_backend, limits.chunk_bytes
        )
        self.data: DataPlane = self._data_plane(bind_host)
        self.address = control.Address(self.router.last_endpoint.decode(), self.data.address)
        self.host_address = bind_host

    def _data_plane(self, bind_host: str) -> DataPlane:
        """The plane that carries core messages: TCP connections of their own."""
        return self._stream_plane(bind_host, self._from_plane, self._refused_on_plane)

    def _stream_plane(
        self,
        bind_host: str,
        receive: Callable[[str, list[Any]], None],
        refused: Callable[[str, list[Any], str], None],
    ) -> StreamPlane:
        return StreamPlane(
            self.proc_id,
            self._keys,
            bind_host,
            self.limits,
            self.loop,
            self.peers,
            receive,
            self._lookup,
            self.refusals,
            self._unreachable,
            refused,
            lambda peer, reason: self.report_unreachable(peer, "data connection", reason),
        )

    # The transport's contract: any thread may call these.

    def start(
        self,
        on_frames: FrameHandler,
        on_loss: LossHandler,
        on_refused: RefusalHandler,
        on_message: MessageHandler,
    ) -> None:
        """Begin delivering (every message comes as frames: ``on_message`` is never called)."""
        self._on_frames = on_frames
        self._on_loss = on_loss
        self._on_refused = on_refused
        self.io.call_soon(self.io.add_reader, self.router, self._readable)
        self.data.start()

    def send(self, dest: str, frames: Sequence[Buffer]) -> None:
        if dest == self.proc_id:
            self.loop.call_soon_threadsafe(self._deliver, dest, copy_frames(frames))
        elif dest in self.peers.lost:
            self._report(self.peers.lost[dest])
        else:
            self.data.send(dest, [DATA, *frames])

    def watch(self, proc: str) -> None:
        self.io.call_soon(self._watch, proc)

    def hosting(self, agent: str, procs: Sequence[str]) -> None:
        self.io.call_soon(self._ask, control.Hosting(agent, list(procs)))

    async def drain(self, timeout: float) -> None:
        """Give the data plane's queued messages up to ``timeout`` s to go out (before `close`)."""
        await self.data.drain(timeout)

    def close(self) -> None:
        """Close both planes (called on the runtime loop's thread)."""
        self.data.stop()
        self.io.call_soon(self._close)

    def register(self, buffer: memoryview) -> MemoryHandle:
        return self.memory.register(buffer)

    def unregister(self, handle: MemoryHandle) -> None:
        self.io.call_soon(self.memory.unregister, handle)

    async def read(self, handle: MemoryHandle, offset: int, dst: memoryview) -> None:
        await self._memory_op(handle, offset, dst, write=False)

    async def write(self, handle: MemoryHandle, offset: int, src: memoryview) -> None:
        await self._memory_op(handle, offset, src, write=True)

    async def _memory_op(
        self, handle: MemoryHandle, offset: int, view: memoryview, write: bool
    ) -> None:
        future: asyncio.Future[None] = self.loop.create_future()
        landing = threading.Lock()
        self.io.call_soon(
            self._start_memory,
            handle,
            offset,
            view,
            write,
            settler(self.loop, future),
            future,
            landing,
        )
        try:
            await future
        except asyncio.CancelledError:
            with landing:  # a chunk landing in ``view`` now is the last: the caller hears after
                raise

    def _start_memory(
        self,
        handle: MemoryHandle,
        offset: int,
        view: memoryview,
        write: bool,
        settle: Settle,
        future: asyncio.Future[None],
        landing: threading.Lock,
    ) -> None:
        loss = self.peers.lost.get(handle.owner)
        if loss is not None:
            settle(memory_owner_lost(loss))
        else:
            self.memory.start(
                handle, offset, view, write, settle, lambda: not future.done(), landing
            )

    # The methods below run on the I/O thread.

    def _send_memory(self, dest: str, message: list[Any]) -> None:
        """Send a memory message (kind frame first) on the data plane, beside core messages."""
        if dest not in self.peers.lost:
            self.data.send(dest, message)

    def _send_raw(self, dest: str, message: list[Any]) -> None:
        """Send a control-plane message (kind frame first), or queue it until ``dest`` is found."""
        if dest in self.peers.lost:
            return
        address = self._address(dest)
        if address is None:
            if self.peers.hold_control(dest, message):
                self._ask(control.Where(dest))
        else:
            self._dealer(dest, address.control).send_multipart(message, copy=False)

    def _lookup(self, dest: str) -> None:
        """The data plane needs ``dest``'s address (from its thread): find it here."""
        self.io.call_soon(self._find, dest)

    def _unreachable(self, dest: str) -> None:
        """The data plane could not reach ``dest`` (from its thread): it may be lost. Ask the
        directory to tell of its loss (now, if it knows of it), so that what waits for it is
        dropped then, not sent again and again until this proc stops."""
        self.io.call_soon(self._ask, control.Watch(dest))

    def report_unreachable(self, peer: str, link: str, reason: str) -> None:
        """This proc's ``link`` with ``peer`` broke while both live (from any thread): the
        controller declares one of them lost (`Directory.unreachable`)."""
        log.info("proc %s: its %s with %s broke: %s", self.proc_id, link, peer, reason)
        self.io.call_soon(self._report_unreachable, control.Unreachable(peer, link, reason))

    def _report_unreachable(self, report: control.Unreachable) -> None:
        if report.proc not in self.peers.lost:
            self._ask(report)

    def _find(self, dest: str) -> None:
        """The data plane waits for ``dest``'s address (I/O thread): ask the directory, unless
        it is known here."""
        address = self._address(dest)
        if address is not None:
            self._resolved(dest, address)
        else:
            self._ask(control.Where(dest))

    def send_control(self, dest: str, message: control.Control) -> None:
        """Send a control message (I/O thread only); to a proc known to be lost, none is sent
        (it would wait in a socket to the dead proc, and hold up closing this process)."""
        if dest == self.proc_id:
            self._handle_control(dest, message)
            return
        if dest in self.peers.lost:
            return
        address = self._controller if dest == ROOT and self._controller else None
        if address is None:
            known = self._address(dest)
            address = known.control if known is not None else None
        if address is None:
            log.error("proc %s: no address for %s; dropped %r", self.proc_id, dest, message)
            return
        self._dealer(dest, address).send_multipart(control.encode(message))

    def _address(self, dest: str) -> control.Address | None:
        address = self.peers.address(dest)
        if address is None and self.directory is not None:
            address = self.directory.address(dest)
        return address

    def _dealer(self, dest: str, endpoint: str) -> zmq.Socket:
        """The zmq socket to ``dest`` (made on first use)."""
        dealer = self._dealers.get(dest)
        if dealer is None:
            dealer = connect_dealer(self._context, self._keys, self.proc_id, endpoint, self.limits)
            self._dealers[dest] = dealer
        return dealer

    def _ask(self, message: control.Control) -> None:
        if self.directory is not None:
            self.directory.handle(self.proc_id, message)
        else:
            self.send_control(ROOT, message)

    def _watch(self, proc: str) -> None:
        if proc in self.peers.lost:
            self._report(self.peers.lost[proc])
        else:
            self._ask(control.Watch(proc))

    def _readable(self) -> None:
        for _ in range(RECV_BATCH):
            try:
                message = self.router.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                break
            src = sender(self.proc_id, message)
            if src is None:
                continue
            kind = message[1].bytes
            if kind == MEMORY:
                self._memory_message(src, [frame.buffer for frame in message[2:]])
            elif kind == CONTROL and len(message) == 3:
                try:
                    self._handle_control(src, control.decode(message[2].buffer))
                except ValueError as exc:
                    log.error(
                        "proc %s: rejected a control message from %s: %s", self.proc_id, src, exc
                    )
            else:
                log.error("proc %s: rejected a message of unknown kind from %s", self.proc_id, src)

    def _memory_message(self, src: str, frames: list[Any]) -> None:
        try:
            self.memory.handle(src, frames)
        except ValueError as exc:
            log.error("proc %s: rejected a memory message from %s: %s", self.proc_id, src, exc)

    def _from_plane(self, src: str, frames: list[Any]) -> None:
        """A message on the data plane, from an authenticated peer (on the plane's thread)."""
        kind = bytes(frames[0])
        if kind == MEMORY:
            self.io.call_soon(self._memory_message, src, frames[1:])
        elif kind != DATA:
            log.error("proc %s: rejected a data message of unknown kind from %s", self.proc_id, src)
        elif asyncio._get_running_loop() is self.loop:
            self._deliver(src, frames[1:])
        elif not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self._deliver, src, frames[1:])

    def _refused_on_plane(self, src: str, frames: list[Any], reason: str) -> None:
        """The data plane refused a message from ``src`` for its size (on its thread, in the
        message's place): the runtime answers its sender, from the leading ``frames`` read."""
        if not frames or bytes(frames[0]) != DATA:
            return  # not a core message: nobody waits on it
        error = MessageTooLargeError(f"proc {self.proc_id} refused {reason} from proc {src}")
        if asyncio._get_running_loop() is self.loop:
            self._refuse(src, frames[1:], error)
        elif not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self._refuse, src, frames[1:], error)

    def _refuse(self, src: str, frames: list[Buffer], error: BaseException) -> None:
        assert self._on_refused is not None
        self._on_refused(src, frames, error)

    def _deliver(self, src: str, frames: list[Buffer]) -> None:
        assert self._on_frames is not None
        self._on_frames(src, frames)

    def _handle_control(self, src: str, message: control.Control) -> None:
        if isinstance(message, control.At):
            self._resolved(message.proc, message.address)
        elif isinstance(message, control.Lost):
            self._peer_lost(message.loss())
        elif self.on_control is not None:
            self.on_control(src, message)

    def find(self, proc: str) -> None:
        """Ask the directory where ``proc`` receives; `on_resolved` tells (I/O thread)."""
        address = self.peers.address(proc)
        if address is not None:
            self._resolved(proc, address)
        else:
            self._ask(control.Where(proc))

    def _resolved(self, proc: str, address: control.Address) -> None:
        waited = self.peers.learn(proc, address)
        self.data.resolved(proc)
        for message in waited:
            self._send_raw(proc, message)
        if self.on_resolved is not None:
            self.on_resolved(proc)

    def _peer_lost(self, loss: ProcLoss) -> None:
        if not self.peers.lose(loss):
            return
        dealer = self._dealers.pop(loss.proc, None)
        if dealer is not None:
            dealer.close(0)
        self.data.forget(loss.proc)
        self.memory.lost(loss)
        self._report(loss)

    def _report(self, loss: ProcLoss) -> None:
        if self._on_loss is not None:
            self.loop.call_soon_threadsafe(self._on_loss, loss)

    def _close(self) -> None:
        """Close the sockets. A worker gives its last messages (to the controller) the dealers'
        linger to go out; the controller closes once every proc it started has ended, and what
        it still has queued is for procs that are gone: it drops that instead of waiting."""
        self._monitor.close()
        self.io.remove_reader(self.router)
        self.router.close(0)
        linger = 0 if self.directory is not None else None
        for dealer in self._dealers.values():
            dealer.close(linger)
        self._dealers.clear()
