"""RDMABuffer on verbs: registered memory, and RDMA READ and WRITE against it.

A proc registers a buffer's memory for remote reads and writes and hands out
a `VerbsHandle` with the region's address and remote key. Another proc reads
or writes it with RDMA READ or WRITE on its memory channel to the owner (one
queue pair for its own transfers to that owner, in chunks of at most the
port's largest message); the owner's NIC serves them, with no work by the
owner's process.

The owner's NIC refuses an access its key and range do not allow (the buffer
was dropped): the transfer fails with `RDMAError` naming the buffer, and both
queue pairs go to the error state. The channel is then replaced by a new one,
and the other transfers it carried are posted again on it. A transfer that is
given up (its timeout) is stopped the only way verbs allow, by moving its
queue pair to ERR; after that the device writes nothing more to its memory.
"""

from __future__ import annotations

import itertools
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from danaus.core.rdma import RDMAError
from danaus.core.transport import DeviceMemory, Memory, MemoryHandle
from danaus.transports.tcp.ioloop import Settle
from danaus.transports.verbs.channel import Channel, Context
from danaus.transports.verbs.device import (
    REMOTE,
    Access,
    Completion,
    DeviceError,
    WcStatus,
    WrOpcode,
)
from danaus.transports.verbs.registrations import Pin, Registrations

WORK_REQUESTS = 32
"""RDMA reads and writes one memory channel keeps in flight."""

FATAL = (WcStatus.RETRY_EXC_ERR, WcStatus.RNR_RETRY_EXC_ERR, WcStatus.FATAL_ERR)
"""Completions that mean the peer cannot be reached: it is lost."""


@dataclass(frozen=True)
class VerbsHandle(MemoryHandle):
    """A buffer's handle on verbs: where its memory is, and the key that opens it."""

    address: int = 0
    rkey: int = 0


def describe(handle: MemoryHandle) -> str:
    return f"the RDMABuffer of {handle.size} bytes registered by {handle.owner} (key {handle.key})"


class LocalBuffers:
    """The memory this proc registered for others, by key. Thread-safe."""

    def __init__(self, proc: str, registrations: Registrations, backend: str) -> None:
        self._proc = proc
        self._registrations = registrations
        self._backend = backend
        self._lock = threading.Lock()
        self._buffers: dict[int, tuple[Memory, Pin]] = {}
        self._keys = itertools.count(1)

    def register(self, memory: Memory) -> VerbsHandle:
        pin = self._registrations.pin(memory, REMOTE, own=True)
        with self._lock:
            key = next(self._keys)
            self._buffers[key] = (memory, pin)
        return VerbsHandle(self._proc, key, memory.nbytes, self._backend, pin.iova(), pin.rkey)

    def unregister(self, key: int) -> None:
        """Deregister now: the key stops opening the memory before this returns."""
        with self._lock:
            found = self._buffers.pop(key, None)
        if found is not None:
            self._registrations.release(found[1])

    def copy(self, handle: MemoryHandle, offset: int, local: Memory, write: bool) -> None:
        """A transfer between two memories of this proc: a copy (CPU memory only)."""
        with self._lock:
            found = self._buffers.get(handle.key)
        if found is None:
            raise RDMAError(f"{describe(handle)} was dropped by its owner", handle)
        memory = found[0]
        if isinstance(memory, DeviceMemory) or isinstance(local, DeviceMemory):
            raise ValueError("a transfer between GPU memories of one process is not supported")
        region = memory[offset : offset + local.nbytes]
        if write:
            region[:] = local
        else:
            local[:] = region

    def close(self) -> None:
        with self._lock:
            pins = [pin for _, pin in self._buffers.values()]
            self._buffers.clear()
        for pin in pins:
            self._registrations.release(pin)


@dataclass(eq=False)
class Operation:
    """One RDMA read (into ``memory``) or write (from it) of a remote buffer."""

    handle: VerbsHandle
    offset: int
    memory: Memory
    write: bool
    settle: Settle
    posted: int = 0
    done: int = 0
    outstanding: int = 0
    pin: Pin | None = None
    finished: bool = False

    @property
    def size(self) -> int:
        return self.memory.nbytes

    def restart(self) -> None:
        """Nothing of it counts any more: it will be posted again from its start."""
        self.posted = self.done = self.outstanding = 0


class MemoryChannel(Channel):
    """This proc's RDMA reads and writes of one peer's memory. All on the I/O thread.

    ``replaced(channel, operations, fatal)`` takes back the unfinished
    operations of a channel that closed: to post them on a new channel, or
    (``fatal``: the peer cannot be reached) to hold them until the peer is
    declared lost.
    """

    kind = "memory channel"

    def __init__(
        self,
        context: Context,
        peer: str,
        generation: int,
        *,
        replaced: Callable[[MemoryChannel, list[Operation], bool], None],
        unreachable: Callable[[str, str], None],
    ) -> None:
        super().__init__(
            context, peer, generation, max_send=WORK_REQUESTS, max_recv=1, access=Access.NONE
        )
        self._replaced = replaced
        self._unreachable = unreachable
        self._queue: deque[Operation] = deque()
        self._posted: dict[int, tuple[Operation, int]] = {}
        self._ids = itertools.count(1)

    def ready(self) -> None:
        self.state = "ready"
        self.pump()

    def submit(self, operation: Operation) -> None:
        self._queue.append(operation)
        self.pump()

    def pump(self) -> None:
        largest = self.context.device.port.max_message
        while self.state == "ready" and self._queue and len(self._posted) < WORK_REQUESTS:
            operation = self._queue[0]
            if operation.pin is None:
                access = Access.NONE if operation.write else Access.LOCAL_WRITE
                try:
                    operation.pin = self.context.registrations.pin(operation.memory, access)
                except (DeviceError, ValueError, TypeError) as exc:
                    self._queue.popleft()
                    finish(self.context.registrations, operation, exc)
                    continue
            length = min(largest, operation.size - operation.posted)
            wr_id = next(self._ids)
            opcode = WrOpcode.RDMA_WRITE if operation.write else WrOpcode.RDMA_READ
            remote = operation.handle.address + operation.offset + operation.posted
            try:
                self.qp.post_send(
                    wr_id,
                    opcode,
                    operation.pin.iova(operation.posted),
                    length,
                    operation.pin.lkey,
                    remote,
                    operation.handle.rkey,
                )
            except DeviceError as exc:
                self._reset(f"posting a work request failed: {exc}", fatal=False)
                return
            self._posted[wr_id] = (operation, length)
            operation.posted += length
            operation.outstanding += 1
            if operation.posted == operation.size:
                self._queue.popleft()

    def completed(self, completion: Completion) -> None:
        found = self._posted.pop(completion.wr_id, None)
        if found is None:
            return
        operation, length = found
        operation.outstanding -= 1
        status = completion.status
        if status is WcStatus.SUCCESS:
            operation.done += length
            if operation.done == operation.size:
                finish(self.context.registrations, operation, None)
            self.pump()
        elif status in FATAL:
            self._reset(f"a work request ended with {status.name}", fatal=True)
        elif status is WcStatus.REM_ACCESS_ERR:
            what = "write to" if operation.write else "read of"
            self._fail(
                operation,
                RDMAError(
                    f"the owner's device refused a {what} {describe(operation.handle)}: "
                    "a remote access error (the buffer was dropped by its owner, or the "
                    "range is not registered)",
                    operation.handle,
                ),
            )
        else:
            self._fail(operation, RuntimeError(f"an RDMA transfer ended with {status.name}"))

    def _fail(self, operation: Operation, error: BaseException) -> None:
        """``operation`` failed: the queue pair is closed first, so its memory is free to go."""
        operation.finished = True
        self._reset(str(error), fatal=False)
        operation.finished = False
        finish(self.context.registrations, operation, error)

    def abort(self, operation: Operation) -> None:
        """Stop ``operation`` for good: after this the device writes nothing to its memory."""
        if operation.finished:
            return
        if operation.outstanding == 0 and operation in self._queue:
            self._queue.remove(operation)
        else:
            operation.finished = True
            self._reset("a transfer was given up", fatal=False)
            operation.finished = False
        finish(self.context.registrations, operation, None)

    def broken(self, reason: str) -> None:
        self._reset(reason, fatal=True)

    def _reset(self, reason: str, *, fatal: bool) -> None:
        """Close the queue pair and hand the unfinished operations back."""
        if self.state == "closed":
            return
        self.close()
        left = list(dict.fromkeys([op for op, _ in self._posted.values()] + list(self._queue)))
        self._posted.clear()
        self._queue.clear()
        unfinished = [op for op in left if not op.finished]
        for operation in unfinished:
            operation.restart()
        if fatal:
            self._unreachable(self.peer, f"its {self} failed: {reason}")
        self._replaced(self, unfinished, fatal)

    def operations(self) -> list[Operation]:
        """Every unfinished operation this channel holds."""
        posted = [op for op, _ in self._posted.values()]
        return [op for op in dict.fromkeys(posted + list(self._queue)) if not op.finished]


class ResponderChannel(Channel):
    """The peer's memory channel to this proc, seen from here: the NIC serves it alone."""

    kind = "memory channel (served)"

    def __init__(self, context: Context, peer: str, generation: int) -> None:
        super().__init__(
            context,
            peer,
            generation,
            max_send=1,
            max_recv=1,
            access=Access.REMOTE_READ | Access.REMOTE_WRITE,
        )


def finish(registrations: Registrations, operation: Operation, error: BaseException | None) -> None:
    """End ``operation`` (once): release its memory, settle its caller."""
    if operation.finished:
        return
    operation.finished = True
    if operation.pin is not None:
        registrations.release(operation.pin)
        operation.pin = None
    operation.settle(error)
