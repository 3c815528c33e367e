"""`Tensor`: the controller's handle to a tensor that lives, one shard per proc, on a mesh.

A handle is a torch tensor subclass with no data: torch reads its shape,
strides, dtype and device, and every operator applied to it reaches
``__torch_dispatch__``, which records the operation for the procs of its mesh
(`danaus.tensor.dispatch`). Autograd and ``nn.Module`` work on handles as on
any tensor, since they are made of such operators. Dropping the last Python
reference to a handle frees its shards (in batches, with the engine's next
message).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from danaus.tensor.propagate import Meta

if TYPE_CHECKING:
    from danaus.core.mesh import ProcMesh
    from danaus.tensor.engine import Engine
    from danaus.tensor.stream import Stream


class Storage:
    """The memory a handle and its views share, and who may touch it now.

    ``access`` is ``"rw"``, ``"r"`` (lent read-only to another stream) or
    ``""`` (lent for writing); ``borrows`` are the live `Borrow` s of it.
    """

    __slots__ = ("access", "borrows")

    def __init__(self) -> None:
        self.access = "rw"
        self.borrows: list[Any] = []


class Tensor(torch.Tensor):
    """A tensor on a mesh: each proc of ``mesh`` holds a shard of its own, of this shape.

    Made by torch operations inside ``with mesh.activate():`` (or on other
    handles); read with `danaus.inspect` or `danaus.fetch_shard`.
    """

    _engine: Engine
    _mesh: ProcMesh
    _stream: Stream
    _id: int | None
    _meta: Meta
    _storage: Storage

    __torch_function__ = torch._C._disabled_torch_function_impl

    @staticmethod
    def __new__(cls, *args: Any, **kwargs: Any) -> Tensor:
        raise TypeError(
            "danaus.Tensor is made by torch operations on an active mesh "
            "(inside `with mesh.activate():`), not directly"
        )

    @classmethod
    def __torch_dispatch__(
        cls, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
    ) -> Any:
        from danaus.tensor.dispatch import dispatch

        return dispatch(func, args, kwargs or {})

    @property
    def mesh(self) -> ProcMesh:
        """The mesh (or slice) whose procs hold this tensor's shards."""
        return self._mesh

    @property
    def stream(self) -> Stream:
        """The stream whose work defines this tensor."""
        return self._stream

    @property
    def dropped(self) -> bool:
        """Whether `drop` was called (its shards are gone)."""
        return self._id is None

    def drop(self) -> None:
        """Free this tensor's shards now, rather than when the handle is garbage."""
        ident, self._id = self._id, None
        if ident is not None:
            self._engine.drop(self._mesh, self._stream, ident)

    def __del__(self) -> None:
        ident = self.__dict__.get("_id")
        if ident is not None:
            self._id = None
            self._engine.drop(self._mesh, self._stream, ident)

    def reduce(
        self,
        dims: str | tuple[str, ...] | list[str],
        reduction: str = "sum",
        scatter: bool = False,
        mesh: Any = None,
        inplace: bool = False,
        out: Tensor | None = None,
        _inplace: bool = False,
    ) -> Tensor:
        """A collective over the mesh dimensions ``dims`` (a name or several).

        ``reduction`` is ``"sum"``, ``"avg"``, ``"product"``, ``"min"``, ``"max"``
        or ``"stack"``. Without ``scatter``, every proc of each group gets the
        whole result (all-reduce; all-gather for ``"stack"``, which adds an outer
        dimension of the group's size); with it, proc ``i`` of a group gets part
        ``i`` of it along the tensor's first dimension, which must be the
        group's size (reduce-scatter; all-to-all for ``"stack"``). ``inplace``
        writes the result into this tensor (all-reduce only); ``out`` into
        another. On CPU it runs on gloo process groups, on CUDA on NCCL ones,
        made once per set of procs; on the simulator over Danaus messages.
        """
        from danaus.tensor.reduce import reduce

        return reduce(self, dims, reduction, scatter, mesh, inplace or _inplace, out)

    def reduce_(
        self,
        dims: str | tuple[str, ...] | list[str],
        reduction: str = "sum",
        scatter: bool = False,
        mesh: Any = None,
    ) -> Tensor:
        """`reduce` in place: the result replaces this tensor's values."""
        return self.reduce(dims, reduction, scatter, mesh, inplace=True)

    def to_mesh(self, mesh: Any, stream: Stream | None = None) -> Tensor:
        """This tensor, moved to ``mesh`` (another proc mesh, or another slice of this one).

        Dimensions are matched by name and must have the same sizes; along a
        dimension of ``mesh`` that this tensor's mesh lacks, each shard is
        copied to every proc. Data goes from proc to proc, never through the
        controller.
        """
        from danaus.tensor.moving import MeshSliceTensor

        return MeshSliceTensor(self, self._mesh).to_mesh(mesh, stream)

    def slice_mesh(self, **dims: int | slice) -> Any:
        """The shards of some procs only (``t.slice_mesh(pp=0)``), to pass to ``to_mesh``."""
        from danaus.tensor.moving import MeshSliceTensor

        return MeshSliceTensor(self, self._mesh.slice(**dims))

    def __repr__(self, *, tensor_contents: Any = None) -> str:
        state = "dropped" if self._id is None else f"id {self._id}"
        return (
            f"danaus.Tensor(shape={list(self.shape)}, dtype={self.dtype}, device={self.device}, "
            f"mesh={self._mesh!r}, {self._stream}, {state})"
        )

    def __reduce_ex__(self, protocol: Any) -> Any:
        raise TypeError(
            "a danaus.Tensor is a handle to shards on a mesh and cannot be pickled; pass it to "
            "a danaus.remote function, or fetch its value with danaus.fetch_shard"
        )


def make(
    engine: Engine, mesh: ProcMesh, stream: Stream, ident: int, meta: Meta, storage: Storage
) -> Tensor:
    """A new handle (the engine's, for a tensor it has just defined on the procs)."""
    _, sizes, strides, offset, dtype, device = meta
    handle = torch.Tensor._make_wrapper_subclass(
        Tensor, sizes, strides=strides, storage_offset=offset, dtype=dtype, device=device
    )
    handle._engine = engine
    handle._mesh = mesh
    handle._stream = stream
    handle._id = ident
    handle._meta = meta
    handle._storage = storage
    return handle
