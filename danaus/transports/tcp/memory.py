"""Registered memory over tcp: reads and writes served by the owner's I/O thread.

There is no RDMA hardware behind this: a read is a request to the owner's
transport, which answers with the bytes straight from the registered memory
(no copy on the sending side: the data plane seals, or sends, the memory
itself), in chunks of ``chunk_bytes``; the reader copies each chunk into the
destination as it arrives. A write is the mirror image. No actor of the owner
takes part, and a busy or blocked endpoint does not delay a transfer.
Everything travels on the data connections between the two procs,
authenticated and sealed as core messages are, never on the control sockets
that carry heartbeats. A transfer keeps at most `WINDOW` chunks in flight,
asking for (or sending) the next one as each arrives (or is acknowledged), so a
call queued behind it on the same connection waits for a few chunks, never for
the whole transfer.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec

from danaus.core.transport import MemoryHandle, ProcLoss, memory_owner_lost
from danaus.transports.tcp.ioloop import Settle

MEMORY = b"M"
WINDOW = 4
"""Chunks of one transfer in flight at once: enough to stream, few enough not to hold up others."""


class Read(msgspec.Struct, tag="read", array_like=True):
    """Send ``length`` bytes at ``offset`` of buffer ``key``; they are at ``at`` in ``op``."""

    op: int
    key: int
    offset: int
    length: int
    at: int = 0


class Data(msgspec.Struct, tag="data", array_like=True):
    """Bytes for ``op`` at ``position`` (relative to its start), in the next frame."""

    op: int
    position: int
    error: str | None = None


class Write(msgspec.Struct, tag="write", array_like=True):
    """Bytes to store at ``offset`` of buffer ``key``, in the next frame."""

    op: int
    key: int
    offset: int


class Ack(msgspec.Struct, tag="ack", array_like=True):
    op: int
    length: int
    error: str | None = None


class Drop(msgspec.Struct, tag="drop", array_like=True):
    key: int


Request = Read | Data | Write | Ack | Drop

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(Request)


def decode(frame: Any) -> Request:
    try:
        return _decoder.decode(frame)
    except (msgspec.MsgspecError, ValueError) as exc:
        raise ValueError(f"bad memory message: {exc}") from None


@dataclass
class _Op:
    """A transfer this proc started, waiting for its bytes or acknowledgments."""

    owner: str
    view: memoryview
    remaining: int
    settle: Settle
    wanted: Callable[[], bool]
    """False once the caller gave up (a timeout): late bytes must not land in ``view``."""
    landing: threading.Lock
    """Held while bytes land in ``view``: a caller that gives up takes it before it hears so,
    and none land after."""
    key: int
    offset: int
    write: bool
    started: int = 0
    """Bytes asked for (a read) or sent (a write) so far."""


class MemoryService:
    """One proc's registered memory, and the transfers it has under way (I/O thread)."""

    def __init__(
        self, proc: str, send: Callable[[str, list[Any]], None], backend: str, chunk_bytes: int
    ) -> None:
        self._proc = proc
        self._send = send
        self._backend = backend
        self._chunk = chunk_bytes
        self._buffers: dict[int, memoryview] = {}
        self._keys = itertools.count(1)
        self._ops: dict[int, _Op] = {}
        self._op_ids = itertools.count(1)

    def register(self, view: memoryview) -> MemoryHandle:
        key = next(self._keys)
        self._buffers[key] = view
        return MemoryHandle(self._proc, key, view.nbytes, self._backend)

    def unregister(self, handle: MemoryHandle) -> None:
        """Forget a buffer here, or ask its owner to (I/O thread)."""
        if handle.owner == self._proc:
            self._buffers.pop(handle.key, None)
        else:
            self._send(handle.owner, [MEMORY, _encoder.encode(Drop(handle.key))])

    def start(
        self,
        handle: MemoryHandle,
        offset: int,
        view: memoryview,
        write: bool,
        settle: Settle,
        wanted: Callable[[], bool],
        landing: threading.Lock,
    ) -> None:
        """Begin a read into ``view`` (or a write from it) of remote memory (I/O thread).

        ``wanted`` turns False once the caller gives up; ``landing`` is held
        while bytes land in ``view`` (see `_Op`).
        """
        if handle.owner == self._proc:
            settle(self._local(handle, offset, view, write))
            return
        op_id = next(self._op_ids)
        op = self._ops[op_id] = _Op(
            handle.owner, view, view.nbytes, settle, wanted, landing, handle.key, offset, write
        )
        for _ in range(WINDOW):
            self._next(op_id, op)

    def _next(self, op_id: int, op: _Op) -> None:
        """Ask for (a read) or send (a write) the next chunk of ``op``, if any is left."""
        position = op.started
        length = min(self._chunk, op.view.nbytes - position)
        if length <= 0:
            return
        op.started += length
        if op.write:
            header = _encoder.encode(Write(op_id, op.key, op.offset + position))
            self._send(op.owner, [MEMORY, header, op.view[position : position + length]])
        else:
            request = Read(op_id, op.key, op.offset + position, length, position)
            self._send(op.owner, [MEMORY, _encoder.encode(request)])

    def _local(
        self, handle: MemoryHandle, offset: int, view: memoryview, write: bool
    ) -> BaseException | None:
        region = self._region(handle.key, offset, view.nbytes)
        if isinstance(region, str):
            return RuntimeError(region)
        if write:
            region[:] = view
        else:
            view[:] = region
        return None

    def _region(self, key: int, offset: int, length: int) -> memoryview | str:
        """``length`` bytes at ``offset`` of registered buffer ``key``, or why there are none."""
        memory = self._buffers.get(key)
        if memory is None:
            return "the RDMA buffer was dropped by its owner"
        if offset + length > memory.nbytes:
            return "out of range"
        return memory[offset : offset + length]

    def handle(self, src: str, frames: list[Any]) -> None:
        """A memory message arrived from ``src`` (I/O thread)."""
        message = decode(frames[0])
        data = frames[1] if len(frames) > 1 else None
        if isinstance(message, Read):
            self._serve_read(src, message)
        elif isinstance(message, Write):
            self._serve_write(src, message, data)
        elif isinstance(message, Drop):
            self._buffers.pop(message.key, None)
        elif isinstance(message, Data):
            self._arrived(message.op, message.error, data, message.position)
        else:
            self._acked(message)

    def _serve_read(self, src: str, request: Read) -> None:
        region = self._region(request.key, request.offset, request.length)
        if isinstance(region, str):
            self._send(src, [MEMORY, _encoder.encode(Data(request.op, 0, region))])
            return
        for position in range(0, request.length, self._chunk):
            chunk = region[position : position + self._chunk]
            header = _encoder.encode(Data(request.op, request.at + position))
            self._send(src, [MEMORY, header, chunk])

    def _serve_write(self, src: str, request: Write, data: Any) -> None:
        length = memoryview(data).nbytes if data is not None else 0
        region = self._region(request.key, request.offset, length)
        if isinstance(region, str):
            error: str | None = region
        else:
            region[:] = data
            error = None
        self._send(src, [MEMORY, _encoder.encode(Ack(request.op, length, error))])

    def _arrived(self, op_id: int, error: str | None, data: Any, position: int) -> None:
        op = self._ops.get(op_id)
        if op is None:
            return
        if error is not None or data is None:
            self._finish(op_id, RuntimeError(error or "a memory answer came without its bytes"))
            return
        chunk = memoryview(data).cast("B")
        if position < 0 or position + chunk.nbytes > op.view.nbytes:
            self._finish(op_id, RuntimeError("the owner answered with bytes out of range"))
            return
        with op.landing:
            if not op.wanted():
                del self._ops[op_id]
                return
            op.view[position : position + chunk.nbytes] = chunk
        op.remaining -= chunk.nbytes
        if op.remaining <= 0:
            self._finish(op_id, None)
        else:
            self._next(op_id, op)

    def _acked(self, ack: Ack) -> None:
        op = self._ops.get(ack.op)
        if op is None:
            return
        if ack.error is not None:
            self._finish(ack.op, RuntimeError(ack.error))
            return
        op.remaining -= ack.length
        if op.remaining <= 0:
            self._finish(ack.op, None)
        else:
            self._next(ack.op, op)

    def _finish(self, op_id: int, error: BaseException | None) -> None:
        op = self._ops.pop(op_id, None)
        if op is not None:
            op.settle(error)

    def lost(self, loss: ProcLoss) -> None:
        """Transfers with a lost proc fail (I/O thread)."""
        error = memory_owner_lost(loss)
        for op_id in [i for i, op in self._ops.items() if op.owner == loss.proc]:
            self._finish(op_id, error)
