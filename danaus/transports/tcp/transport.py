"""A proc's endpoint over ZeroMQ: one authenticated ROUTER to receive, a DEALER per peer to send.

One DEALER per destination keeps messages of a pair in order (one TCP
connection). All socket work happens on the I/O thread; ``send`` only queues.
Large frames go out and come in without copies (pyzmq zero-copy above its copy
threshold); received frames are handed to the runtime as writable memoryviews
of the zmq messages themselves.

Peers are found through the controller's directory: a proc asks where a peer
receives and queues what it sends until the answer comes. Peers that are lost
are reported by the directory to every proc that watches them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import zmq

from danaus.core.errors import SupervisionError
from danaus.transports.base import (
    Buffer,
    FrameHandler,
    LossHandler,
    MemoryHandle,
    ProcLoss,
    Transport,
)
from danaus.transports.tcp import control
from danaus.transports.tcp.control import CONTROL, DATA
from danaus.transports.tcp.ioloop import IoLoop, settler
from danaus.transports.tcp.memory import MEMORY, MemoryService
from danaus.transports.tcp.security import JobKeys

if TYPE_CHECKING:
    from danaus.transports.tcp.directory import Directory

log = logging.getLogger("danaus.tcp")

ROOT = "root"
RECV_BATCH = 256


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
        bind_host: str = "127.0.0.1",
        controller_address: str | None = None,
        max_frame_bytes: int = -1,
    ) -> None:
        self.proc_id = proc_id
        self.host = host
        self.io = io
        self.loop = loop
        self._context = context
        self._keys = keys
        self.router = context.socket(zmq.ROUTER)
        keys.serve(self.router)
        self.router.linger = 0
        self.router.rcvhwm = 0
        self.router.maxmsgsize = max_frame_bytes
        self.router.bind(f"tcp://{bind_host}:*")
        self.address = self.router.last_endpoint.decode()
        self.directory: Directory | None = None
        self.on_control: Callable[[str, control.Control], None] | None = None
        self._dealers: dict[str, zmq.Socket] = {}
        self._addresses: dict[str, str] = {}
        if controller_address is not None:
            self._addresses[ROOT] = controller_address
        self._pending: dict[str, list[list[Any]]] = {}
        self._lost: dict[str, ProcLoss] = {}
        self._on_frames: FrameHandler | None = None
        self._on_loss: LossHandler | None = None
        self.memory = MemoryService(proc_id, self._send_raw)

    # ---- the contract (any thread) ----------------------------------------------------

    def start(self, on_frames: FrameHandler, on_loss: LossHandler) -> None:
        self._on_frames = on_frames
        self._on_loss = on_loss
        self.io.call_soon(self.io.add_reader, self.router, self._readable)

    def send(self, dest: str, frames: Sequence[Buffer]) -> None:
        self.io.call_soon(self._send, dest, frames)

    def watch(self, proc: str) -> None:
        self.io.call_soon(self._watch, proc)

    def close(self) -> None:
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
        self.io.call_soon(
            self._start_memory, handle, offset, view, write, settler(self.loop, future)
        )
        await future

    def _start_memory(
        self,
        handle: MemoryHandle,
        offset: int,
        view: memoryview,
        write: bool,
        settle: Callable[[BaseException | None], None],
    ) -> None:
        loss = self._lost.get(handle.owner)
        if loss is not None:
            settle(SupervisionError(f"the owner of the memory is gone: {loss.describe()}", loss))
        else:
            self.memory.start(handle, offset, view, write, settle)

    # ---- I/O thread ---------------------------------------------------------------------

    def _send(self, dest: str, frames: Sequence[Buffer]) -> None:
        if dest == self.proc_id:
            copied = [f if isinstance(f, bytes) else bytearray(f) for f in frames]
            self.loop.call_soon_threadsafe(self._deliver, [(dest, copied)])
            return
        if dest in self._lost:
            self._report(self._lost[dest])
            return
        self._send_raw(dest, [DATA, *frames])

    def _send_raw(self, dest: str, message: list[Any]) -> None:
        """Send a whole zmq message (kind frame first), or queue it until ``dest`` is found."""
        if dest in self._lost:
            return
        dealer = self._dealer(dest)
        if dealer is None:
            self._pending.setdefault(dest, []).append(message)
            return
        dealer.send_multipart(message, copy=False)

    def send_control(self, dest: str, message: control.Control) -> None:
        """Send a control message (I/O thread only)."""
        if dest == self.proc_id:
            self._handle_control(dest, message)
            return
        dealer = self._dealer(dest)
        if dealer is None:
            log.error("proc %s: no address for %s; dropped %r", self.proc_id, dest, message)
            return
        dealer.send_multipart(control.encode(message))

    def _dealer(self, dest: str) -> zmq.Socket | None:
        """The socket to ``dest``; None (having asked the directory) until its address is known."""
        dealer = self._dealers.get(dest)
        if dealer is not None:
            return dealer
        address = self._addresses.get(dest)
        if address is None and self.directory is not None:
            address = self.directory.address(dest)
        if address is None:
            if dest not in self._pending:
                self._pending[dest] = []
                self._ask(control.Where(dest))
            return None
        dealer = self._context.socket(zmq.DEALER)
        self._keys.connect_as_client(dealer)
        dealer.identity = self.proc_id.encode()
        dealer.sndhwm = 0
        dealer.linger = 1000
        dealer.connect(address)
        self._dealers[dest] = dealer
        return dealer

    def _ask(self, message: control.Control) -> None:
        if self.directory is not None:
            self.directory.handle(self.proc_id, message)
        else:
            self.send_control(ROOT, message)

    def _watch(self, proc: str) -> None:
        if proc in self._lost:
            self._report(self._lost[proc])
        else:
            self._ask(control.Watch(proc))

    def _readable(self) -> None:
        batch: list[tuple[str, list[Buffer]]] = []
        for _ in range(RECV_BATCH):
            try:
                message = self.router.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                break
            if len(message) < 3:
                log.error("proc %s: rejected a message of %d frames", self.proc_id, len(message))
                continue
            try:
                src = message[0].bytes.decode()
            except UnicodeDecodeError:
                log.error(
                    "proc %s: rejected a message from a peer with a bad identity", self.proc_id
                )
                continue
            kind = message[1].bytes
            if kind == DATA:
                batch.append((src, [frame.buffer for frame in message[2:]]))
            elif kind == MEMORY:
                try:
                    self.memory.handle(src, [frame.buffer for frame in message[2:]])
                except ValueError as exc:
                    log.error(
                        "proc %s: rejected a memory message from %s: %s", self.proc_id, src, exc
                    )
            elif kind == CONTROL and len(message) == 3:
                try:
                    self._handle_control(src, control.decode(message[2].buffer))
                except ValueError as exc:
                    log.error(
                        "proc %s: rejected a control message from %s: %s", self.proc_id, src, exc
                    )
            else:
                log.error("proc %s: rejected a message of unknown kind from %s", self.proc_id, src)
        if batch:
            self.loop.call_soon_threadsafe(self._deliver, batch)

    def _deliver(self, batch: list[tuple[str, list[Buffer]]]) -> None:
        assert self._on_frames is not None
        for src, frames in batch:
            self._on_frames(src, frames)

    def _handle_control(self, src: str, message: control.Control) -> None:
        if isinstance(message, control.At):
            self._resolved(message.proc, message.address)
        elif isinstance(message, control.Lost):
            self._peer_lost(message.loss())
        elif self.directory is not None:
            self.directory.handle(src, message)
        elif self.on_control is not None:
            self.on_control(src, message)

    def _resolved(self, proc: str, address: str) -> None:
        self._addresses[proc] = address
        waiting = self._pending.pop(proc, [])
        dealer = self._dealer(proc)
        assert dealer is not None
        for message in waiting:
            dealer.send_multipart(message, copy=False)

    def _peer_lost(self, loss: ProcLoss) -> None:
        if loss.proc in self._lost:
            return
        self._lost[loss.proc] = loss
        self._pending.pop(loss.proc, None)
        dealer = self._dealers.pop(loss.proc, None)
        if dealer is not None:
            dealer.close(0)
        self.memory.lost(loss)
        self._report(loss)

    def _report(self, loss: ProcLoss) -> None:
        if self._on_loss is not None:
            self.loop.call_soon_threadsafe(self._on_loss, loss)

    def _close(self) -> None:
        self.io.remove_reader(self.router)
        self.router.close(0)
        for dealer in self._dealers.values():
            dealer.close()
        self._dealers.clear()
