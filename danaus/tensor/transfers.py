"""Moving shards between procs (``to_mesh``): proc to proc, never through the controller.

Where the transport reads memory one-sided (ucx, verbs, and the simulator),
the sending proc registers its shard (no copy, when the shard is contiguous)
and sends each receiving proc's worker the handle; the receiver reads the
bytes straight from the sender's memory. Elsewhere (tcp, whose reads of
registered memory a transport thread of the owner serves) the shard itself
travels in the message, out of band, which is the faster of the two there.
Either way the receiver then says so, and until every receiver has, work on
the sender that would write to the shard waits (and the shard stays alive).
A receiver reading one-sided reuses the memory of a shard it received before
and no longer uses, of the same size, rather than fault in new pages. The
controller only ever sends the two commands.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import torch

from danaus.core.actor_mesh import placement_of
from danaus.core.future import Future, new_future
from danaus.core.rdma import as_bytes
from danaus.core.transport import MemoryHandle
from danaus.tensor.errors import RemoteTensorError
from danaus.tensor.failed import Failed

if TYPE_CHECKING:
    from danaus.core.actor_mesh import ActorMesh
    from danaus.tensor.executor import Executor
    from danaus.tensor.worker import WorkerState


class _Outgoing:
    """A shard offered to receivers that have not all read it yet."""

    __slots__ = ("done", "handle", "pending", "source", "storage")

    def __init__(
        self, source: torch.Tensor, handle: MemoryHandle | None, pending: set[int], done: Any
    ) -> None:
        self.source = source
        self.storage = source.untyped_storage().data_ptr()
        self.handle = handle
        self.pending = pending
        self.done = done


class Transfers:
    """The shards one proc offers and receives."""

    def __init__(self, state: WorkerState) -> None:
        self._state = state
        self._lock = threading.Lock()
        self._outgoing: dict[int, _Outgoing] = {}
        self._received: list[torch.Tensor] = []
        """The most recent shards read one-sided, oldest first: their memory is reused."""

    @property
    def busy(self) -> bool:
        """Whether some shard of this proc is still being read by a receiver."""
        return bool(self._outgoing)

    def send(self, executor: Executor, command: tuple[Any, ...]) -> None:
        _, transfer, src, sends, peers = command
        state = self._state
        receivers = sends.get(state.rank)
        if not receivers:
            return
        key = ("transfer", transfer, state.rank)
        value = state.table[src]
        if not isinstance(value, torch.Tensor):  # failed: the receivers' copies fail too
            for rank in receivers:
                member(peers, rank).deliver.broadcast(key, value.error.dependent())
            return
        transport = state.runtime.transport
        source = value.detach()
        if source.device.type not in transport.memory_devices:
            source = source.cpu()
        source = source.contiguous()
        handle = None
        if transport.memory_one_sided and source.numel():
            handle = transport.register(as_bytes(source, writable=True, what="a shard"))
        done, _ = new_future(state.runtime.loop)
        with self._lock:
            self._outgoing[transfer] = _Outgoing(source, handle, set(receivers), done)
        offer = (source if handle is None else handle, str(value.device))
        for rank in receivers:
            member(peers, rank).deliver.broadcast(key, offer)

    def recv(self, executor: Executor, command: tuple[Any, ...]) -> None:
        _, transfer, out, sources, shape, dtype, peers = command
        state = self._state
        source = sources.get(state.rank)
        if source is None:
            return
        sender = placement_of(peers).members()[source]
        offer = executor.wait(state.inbox.take(("transfer", transfer, source), sender))
        if isinstance(offer, RemoteTensorError):
            state.table[out] = Failed(offer)
            return
        data, device = offer
        if isinstance(data, torch.Tensor):  # it came in the message
            received = data.reshape(shape)
        else:
            received = self._buffer(shape, dtype)
            runtime = state.runtime
            runtime.on_loop(runtime.watch, data.owner)
            view = as_bytes(received, writable=True, what="a received shard")
            executor.wait(runtime.submit(runtime.transport.read(data, 0, view)))
        state.table[out] = received if device == "cpu" else received.to(device)
        member(peers, source).transferred.broadcast(transfer, state.rank)

    def _buffer(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        """Memory to read a shard into: that of a shard received before and no longer used,
        when there is one of its size, else new.

        New memory costs the kernel a page fault for each of its pages on first touch
        (64 MiB: 16,384 pages, about 15 ms on a small VM), which halved the speed of moving
        tensors of the same size over and over (the activations of a pipeline's stages).
        """
        with self._lock:
            for index, kept in enumerate(self._received):
                if kept.shape == shape and kept.dtype == dtype and _unused(kept):
                    del self._received[index]
                    self._received.append(kept)
                    return kept
            fresh = torch.empty(shape, dtype=dtype)
            self._received.append(fresh)
            del self._received[:-KEPT_BUFFERS]
            return fresh

    def done(self, transfer: int, rank: int) -> None:
        """Receiver ``rank`` has read the shard of ``transfer`` (on the worker's thread)."""
        with self._lock:
            outgoing = self._outgoing.get(transfer)
            if outgoing is None:
                return
            outgoing.pending.discard(rank)
            if outgoing.pending:
                return
            del self._outgoing[transfer]
        if outgoing.handle is not None:
            self._state.runtime.transport.unregister(outgoing.handle)
        self._state.runtime.on_loop(_settle, outgoing.done)

    def before_write(self, executor: Executor, targets: list[Any]) -> None:
        """Wait until no receiver still reads the memory of ``targets`` (about to be written)."""
        storages = {t.untyped_storage().data_ptr() for t in targets if isinstance(t, torch.Tensor)}
        with self._lock:
            waits = [o.done for o in self._outgoing.values() if o.storage in storages]
        for afut in waits:
            executor.wait(Future(self._state.runtime.loop, afut))


KEPT_BUFFERS = 4
"""Received shards a proc keeps to read later shards into, once nothing else uses them."""


def _unused(tensor: torch.Tensor) -> bool:
    """Whether nothing but ``tensor`` itself (no handle of the table, no view) uses its memory.

    The count of the storage's owners includes ``tensor`` and the storage object made to
    ask. Without torch's count (a private function), no memory is reused.
    """
    count = getattr(torch._C, "_storage_Use_Count", None)
    return count is not None and count(tensor.untyped_storage()._cdata) <= 2


def member(workers: ActorMesh[Any], rank: int) -> ActorMesh[Any]:
    """The worker of root rank ``rank`` of a mesh of workers, as a mesh of one."""
    return workers.slice(**placement_of(workers).shape.point(rank))


def _settle(afut: Any) -> None:
    if not afut.done():
        afut.set_result(None)
