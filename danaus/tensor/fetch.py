"""Values to the controller: `fetch_shard`, `inspect`, `show`.

A fetch is a command like any other, after everything recorded before it on
its stream; the proc at the given coordinates answers with copies of the
shards, or with the `RemoteTensorError` of the first failure they depend on.
It leaves at once, after the pending batch, for that proc alone, and the
answer comes to a port that also fails if the proc is lost.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, TypeVar

import torch
from torch.utils import _pytree as pytree

from danaus.core.actor_mesh import placement_of
from danaus.core.future import Future, new_future
from danaus.core.ports import FirstHandler
from danaus.core.shape import Shape
from danaus.tensor import commands
from danaus.tensor.errors import RemoteTensorError, TensorUsageError
from danaus.tensor.handle import Tensor

if TYPE_CHECKING:
    from danaus.tensor.engine import Engine

T = TypeVar("T")


def root_rank(shape: Shape, coords: dict[str, int]) -> int:
    """The position in the proc list of the proc at ``coords`` of ``shape`` (0 where not given)."""
    unknown = set(coords) - set(shape.labels)
    if unknown:
        raise KeyError(f"the mesh has no dimension {sorted(unknown)}; it has {list(shape.labels)}")
    point = {label: coords.get(label, 0) for label in shape.labels}
    return shape.slice(**point).ndslice.offset


OUT_OF_BAND = 64 * 1024
"""Shards of this many bytes travel as a view of their memory, out of band; smaller ones as
a copy in the message."""


def pack(tensors: list[torch.Tensor]) -> list[tuple[str, tuple[int, ...], Any]]:
    """Shards as plain values for a reply: (dtype name, shape, bytes): several times cheaper to
    pickle than tensors (a fetch's answer is usually small, and its latency is the point)."""
    packed = []
    for tensor in tensors:
        raw = tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy()
        data = memoryview(raw) if raw.nbytes >= OUT_OF_BAND else raw.tobytes()
        packed.append((str(tensor.dtype).removeprefix("torch."), tuple(tensor.shape), data))
    return packed


def unpack(packed: list[tuple[str, tuple[int, ...], Any]]) -> list[torch.Tensor]:
    """The shards `pack` made, as new tensors of this process."""
    tensors = []
    for dtype, shape, data in packed:
        raw = bytearray(data) if isinstance(data, bytes) else data
        flat = (
            torch.frombuffer(raw, dtype=torch.uint8)
            if len(raw)
            else torch.empty(0, dtype=torch.uint8)
        )
        tensors.append(flat.view(getattr(torch, dtype)).reshape(shape))
    return tensors


class _Values(FirstHandler):
    """The answer of one fetch: the shards' values, put back into the fetched structure."""

    def __init__(
        self, proc: str, afut: asyncio.Future[Any], leaves: list[Any], spec: Any, engine: Engine
    ) -> None:
        super().__init__([proc], afut)
        self._leaves = leaves
        self._spec = spec
        self._engine = engine

    def arrived(self, rank: int, value: Any, exc: BaseException | None) -> None:
        if isinstance(exc, RemoteTensorError) and not exc.issued:
            exc.issued = self._engine.issued(exc.issued_at)
        if exc is None:
            values = iter(unpack(value))
            leaves = [next(values) if isinstance(leaf, Tensor) else leaf for leaf in self._leaves]
            value = pytree.tree_unflatten(leaves, self._spec)
        super().arrived(rank, value, exc)


def fetch_shard(obj: T, shard: dict[str, int] | None = None, **coords: int) -> Future[T]:
    """A future of ``obj`` (any structure of handles and values) with each handle replaced
    by its shard on the proc at ``shard`` / ``coords`` (0 along dimensions not given)."""
    where = {**(shard or {}), **coords}
    leaves, spec = pytree.tree_flatten(obj)
    handles = [leaf for leaf in leaves if isinstance(leaf, Tensor)]
    if not handles:
        from danaus.core.context import context

        return _done(context().actor_instance.runtime.loop, obj)
    first = handles[0]
    for handle in handles:
        if handle.dropped:
            raise TensorUsageError(f"{handle!r} was dropped and cannot be fetched")
        if (
            handle._engine is not first._engine
            or placement_of(handle._mesh).shape != placement_of(first._mesh).shape
        ):
            raise TensorUsageError("fetch_shard takes tensors of one mesh at a time")
        if handle._stream is not first._stream:
            raise TensorUsageError("fetch_shard takes tensors of one stream at a time")
    engine = first._engine
    rank = root_rank(placement_of(first._mesh).shape, where)
    proc = placement_of(engine.whole).members()[rank]
    runtime = engine.runtime
    afut, future = new_future(runtime.loop)
    port = runtime.open_port(_Values(proc, afut, leaves, spec, engine))
    runtime.watch(proc)
    ids = [handle._id for handle in handles]
    engine.send_to_one(rank, first._stream, (commands.FETCH, rank, ids, port))
    return future


def _done(loop: asyncio.AbstractEventLoop, value: Any) -> Future[Any]:
    afut, future = new_future(loop)
    afut.set_result(value)
    return future


def inspect(obj: T, shard: dict[str, int] | None = None, **coords: int) -> T:
    """``obj`` with each handle replaced by its shard at ``coords`` (waits for it)."""
    return fetch_shard(obj, shard, **coords).get()


def show(obj: Any, shard: dict[str, int] | None = None, **coords: int) -> None:
    """Print what `inspect` returns."""
    print(inspect(obj, shard, **coords))
