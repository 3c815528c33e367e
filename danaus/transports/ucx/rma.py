"""One-sided RDMA over UCX: memory that others read and write while its owner's Python sleeps.

Registering memory maps it with UCP (``ucp_mem_map``) and packs its remote key
(``ucp_rkey_pack``) into the handle, a `UcxMemoryHandle`, with the address of
the owner's UCP worker. A reader or writer connects to that worker, unpacks
the key against its endpoint and issues ``ucp_get_nbx`` or ``ucp_put_nbx``
(then ``ucp_ep_flush_nbx``, so a write is over only once the owner has the
bytes). Between processes of a host UCX moves the bytes with CMA
(``process_vm_readv``/``process_vm_writev``), a kernel copy in which the owner
takes no part at all; between hosts over TCP it emulates the transfer in the
owner's UCX progress engine; over InfiniBand or RoCE (with a UCX built with
verbs) the network cards do it. In no case does Python run in the owner.

How it is bound, and why that way. ``ucxx``'s Python API has no memory handles
or remote keys, so the UCP calls live in a small C++ library, ``rma.cpp``,
compiled on first use (`rma_build`) and loaded with ctypes (`rma_library`).
That library does not share ucxx's UCP worker: it makes a context and a worker
of its own and drives them from a thread of its own, the only thread that ever
calls UCP on them. So nothing races with ucxx's progress thread (which would
need ucxx's delayed submission for every call), and the thread never needs the
GIL. A worker of its own was forced by UCX's transport selection: ucxx's
context has the tag and active-message features, which enable rendezvous, and
then with peer-failure handling UCP only uses RMA lanes whose memory can be
invalidated, which rules out CMA and leaves TCP emulation (0.5-1.4 GB/s here
against 6-11 GB/s); without peer-failure handling, a dead owner aborts the
reader (UCX treats CMA's ESRCH as fatal) and closing an endpoint does not stop
emulated gets, whose late replies still land. This worker has RMA alone, no
rendezvous, and peer-failure handling.

Dropped buffers. UCX's TCP and CMA paths do not check remote keys: a stale
handle would reach memory that may have been given back. So every transfer
first reads the buffer's validity cell (see ``rma.cpp``), which a drop zeroes at
once, and fails with "dropped" if it no longer holds the handle's generation.
A transfer that passed that check just before the drop may still be moving
data, so the transport keeps dropped memory alive until UCX has flushed what
it was sending and `GRACE` seconds more.

Threads: `OneSidedMemory.register` and `unregister` run on the caller's thread
(the library waits for its own); transfers, completions and losses are handled
on the transport's I/O thread, like tcp's `MemoryService`.
"""

from __future__ import annotations

import contextlib
import ipaddress
import itertools
import logging
import os
import threading
from dataclasses import dataclass
from functools import partial

from danaus.core import config
from danaus.core.settings import variable
from danaus.core.transport import DeviceMemory, Memory, MemoryHandle, ProcLoss, memory_owner_lost
from danaus.transports.tcp.ioloop import IoLoop, Settle
from danaus.transports.ucx.rma_library import BAD_KEY, CLOSED, DROPPED, NativeRma, Region, load

log = logging.getLogger("danaus.ucx")

HOST = 0
"""``UCS_MEMORY_TYPE_HOST``."""
GRACE = 5.0
"""Seconds dropped memory stays alive after UCX has flushed what it was sending from it."""
LOSS_WAIT = 5.0
"""Seconds a transfer that UCX failed waits to learn whether its owner is lost."""


@dataclass(frozen=True)
class UcxMemoryHandle(MemoryHandle):
    """A one-sided registration: the owner's worker, the memory's address and remote keys."""

    worker: bytes
    address: int
    rkey: bytes
    cell: int
    cell_rkey: bytes
    generation: int


def describe(handle: MemoryHandle) -> str:
    """How errors name a buffer."""
    return f"RDMA buffer {handle.key} of {handle.owner} ({handle.size} bytes)"


def address_of(memory: Memory) -> int:
    """Where ``memory`` starts in this process."""
    if isinstance(memory, DeviceMemory):
        return memory.address
    import numpy as np  # here: a proc that makes no transfer does not pay numpy's import

    return int(np.frombuffer(memory, dtype=np.uint8).ctypes.data)


@dataclass
class _Peer:
    """This proc's endpoint to one owner's RMA worker."""

    pointer: int
    owner: str
    reset: bool = False
    """Closed by this proc to stop a transfer it gave up on; the others on it are retried."""


@dataclass
class _Op:
    """A transfer under way: ``local`` stays referenced until UCX is done with it."""

    handle: UcxMemoryHandle
    offset: int
    local: Memory
    write: bool
    settle: Settle
    peer: _Peer | None = None
    outcome: BaseException | None = None
    """Decided before UCX finished: the owner is lost, or the caller gave up."""


def network_devices(bind_host: str) -> str:
    """The network devices UCX may use for one-sided transfers ("" for UCX's choice).

    A job that binds to loopback (all its procs on one host) keeps its RMA
    worker off the machine's other interfaces, as its sockets are; an explicit
    ``UCX_NET_DEVICES`` wins.
    """
    if os.environ.get("UCX_NET_DEVICES"):
        return ""
    try:
        loopback = ipaddress.ip_address(bind_host).is_loopback
    except ValueError:
        loopback = bind_host == "localhost"
    return "lo" if loopback else ""


def available(proc: str, io: IoLoop, bind_host: str) -> tuple[OneSidedMemory | None, str]:
    """This process's one-sided memory, or None and why there is none."""
    if not config.setting("ucx_rma"):
        return None, f"one-sided transfers are turned off ({variable('ucx_rma')}=off)"
    from danaus.transports.ucx import rma_build  # not at import: it also runs as a script

    try:
        native = NativeRma(load(rma_build.library()), network_devices(bind_host))
    except (rma_build.RmaUnavailable, OSError) as exc:
        return None, f"one-sided transfers are unavailable: {exc}"
    try:
        return OneSidedMemory(proc, io, native), ""
    except OSError as exc:
        native.shutdown()
        return None, f"one-sided transfers are unavailable: {exc}"


class OneSidedMemory:
    """One proc's one-sided registrations, and the transfers it has under way."""

    def __init__(self, proc: str, io: IoLoop, native: NativeRma) -> None:
        self._proc = proc
        self._io = io
        self._native = native
        self.address = native.address()
        cuda = native.memory_types() & (1 << native.cuda_type)
        self.devices = frozenset({"cpu", "cuda"} if cuda else {"cpu"})
        self._keys = itertools.count(1)
        self._tokens = itertools.count(1)
        self._lock = threading.Lock()
        self._regions: dict[int, tuple[Region, Memory]] = {}
        self._retiring: dict[int, Memory] = {}
        self._held: dict[int, Memory] = {}
        self._ops: dict[int, _Op] = {}
        self._parked: dict[int, tuple[_Op, str]] = {}
        self._peers: dict[tuple[str, bytes], _Peer] = {}
        self._losses: dict[str, ProcLoss] = {}
        self._closed = False
        io.call_soon(io.add_reader, native.eventfd, self._drain)

    def token(self) -> int:
        """A fresh id for a transfer (thread-safe)."""
        return next(self._tokens)

    def register(self, memory: Memory) -> UcxMemoryHandle:
        """Map ``memory`` with UCP and make the handle others reach it with."""
        address = address_of(memory)
        memory_type = HOST
        if isinstance(memory, DeviceMemory):
            memory_type = self._native.cuda_type
        with self._lock:
            if self._closed:
                raise RuntimeError("the transport is closed: no memory can be registered")
            try:
                region = self._native.map(address, memory.nbytes, memory_type)
            except OSError as exc:
                device = memory.device if isinstance(memory, DeviceMemory) else "cpu"
                raise RuntimeError(
                    f"UCX cannot register {memory.nbytes} bytes of {device} memory: {exc}"
                ) from None
            key = next(self._keys)
            self._regions[key] = (region, memory)
        return UcxMemoryHandle(
            self._proc,
            key,
            memory.nbytes,
            "ucx",
            self.address,
            address,
            region.key,
            region.cell,
            region.cell_key,
            region.generation,
        )

    def unregister(self, key: int) -> None:
        """Drop registration ``key``: from now on its transfers fail (idempotent)."""
        with self._lock:
            entry = self._regions.pop(key, None)
            if entry is None or self._closed:
                return
            region, memory = entry
            token = self.token()
            self._retiring[token] = memory
            self._native.unmap(region, token)

    def start(
        self,
        token: int,
        handle: UcxMemoryHandle,
        offset: int,
        local: Memory,
        write: bool,
        settle: Settle,
    ) -> None:
        """Begin a read into ``local`` (or a write from it) of ``handle``'s memory."""
        if self._closed:
            settle(RuntimeError("the transport closed"))
            return
        end = offset + local.nbytes
        if offset < 0 or end > handle.size:
            settle(RuntimeError(f"{describe(handle)}: bytes {offset}..{end} are out of range"))
            return
        op = _Op(handle, offset, local, write, settle)
        self._ops[token] = op
        self._submit(token, op)

    def abort(self, token: int) -> None:
        """The caller gave up on ``token``: stop it, so nothing of it lands later."""
        if self._closed:
            return
        parked = self._parked.pop(token, None)
        if parked is not None:
            parked[0].settle(TimeoutError("given up"))
            return
        op = self._ops.get(token)
        if op is None or op.peer is None:
            return
        op.outcome = op.outcome or TimeoutError("given up")
        op.peer.reset = True
        self._close_peer(op.peer)

    def lost(self, loss: ProcLoss) -> None:
        """Transfers with a lost proc fail with `SupervisionError` once UCX has stopped them."""
        if self._closed:
            return
        self._losses[loss.proc] = loss
        error = memory_owner_lost(loss)
        for token, (op, _) in list(self._parked.items()):
            if op.handle.owner == loss.proc:
                del self._parked[token]
                op.settle(error)
        for op in self._ops.values():
            if op.handle.owner == loss.proc:
                op.outcome = op.outcome or error
        for peer in [p for p in self._peers.values() if p.owner == loss.proc]:
            self._close_peer(peer)

    def close(self) -> None:
        """Release the worker and the context, then fail what was still under way."""
        with self._lock:
            self._closed = True
        self._io.remove_reader(self._native.eventfd)
        for peer in list(self._peers.values()):
            self._close_peer(peer)
        self._native.shutdown()  # once it returns, UCX touches no transfer's memory
        closed = RuntimeError("the transport closed")
        for op in list(self._ops.values()) + [op for op, _ in self._parked.values()]:
            op.settle(closed)
        self._ops.clear()
        self._parked.clear()

    def _submit(self, token: int, op: _Op) -> None:
        handle = op.handle
        peer = self._peers.get((handle.owner, handle.worker))
        if peer is None:
            peer = _Peer(self._native.peer(handle.worker), handle.owner)
            self._peers[(handle.owner, handle.worker)] = peer
        op.peer = peer
        local_type = HOST
        if isinstance(op.local, DeviceMemory):
            local_type = self._native.cuda_type
        self._native.submit(
            peer.pointer,
            token,
            op.write,
            address_of(op.local),
            op.local.nbytes,
            local_type,
            handle.address + op.offset,
            handle.rkey,
            handle.cell,
            handle.cell_rkey,
            handle.generation,
        )

    def _close_peer(self, peer: _Peer) -> None:
        for key, known in list(self._peers.items()):
            if known is peer:
                del self._peers[key]
                self._native.close(peer.pointer)

    def _drain(self) -> None:
        with contextlib.suppress(BlockingIOError):
            os.eventfd_read(self._native.eventfd)
        for token, status in self._native.completions():
            with self._lock:
                memory = self._retiring.pop(token, None)
            if memory is not None:
                self._held[token] = memory
                self._io.call_later(GRACE, partial(self._held.pop, token, None))
                continue
            op = self._ops.pop(token, None)
            if op is not None:
                self._finished(token, op, status)

    def _finished(self, token: int, op: _Op, status: int) -> None:
        """UCX is done with ``op``: settle it, retry it, or wait to learn why it failed."""
        name = describe(op.handle)
        if status == 0:
            op.settle(None)
            return
        if status == DROPPED:
            op.settle(RuntimeError(f"{name}: the RDMA buffer was dropped by its owner"))
            return
        if status == BAD_KEY:
            op.settle(RuntimeError(f"{name}: its remote key does not unpack here"))
            return
        if op.peer is not None and not op.peer.reset:
            self._close_peer(op.peer)
        if op.outcome is not None:
            op.settle(op.outcome)
            return
        if op.peer is not None and op.peer.reset:
            self._ops[token] = op
            self._submit(token, op)
            return
        loss = self._losses.get(op.handle.owner)
        if loss is not None:
            op.settle(memory_owner_lost(loss))
            return
        reason = "closed" if status == CLOSED else self._native.status_text(status)
        self._parked[token] = (op, f"{name}: UCX failed the transfer: {reason}")
        self._io.call_later(LOSS_WAIT, partial(self._give_up, token))

    def _give_up(self, token: int) -> None:
        """No loss was reported for a failed transfer's owner: fail it with UCX's reason."""
        parked = self._parked.pop(token, None)
        if parked is not None:
            op, reason = parked
            op.settle(RuntimeError(reason))
