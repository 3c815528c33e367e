"""Collectives, as the controller records them: `reduce`, `reduce_` (and ``Tensor.reduce``).

The controller checks the request, works out the result's shape, defines
the groups of procs once per mesh and set of dimensions, and records one
`REDUCE` command; `danaus.tensor.collectives` does the rest on the procs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

import torch
from torch.utils import _pytree as pytree

from danaus.core.actor_mesh import placement_of
from danaus.tensor import commands, stream
from danaus.tensor.collectives import REDUCTIONS
from danaus.tensor.errors import TensorUsageError
from danaus.tensor.handle import Storage, Tensor
from danaus.tensor.propagate import contiguous_meta

if TYPE_CHECKING:
    from danaus.core.mesh import ProcMesh

T = TypeVar("T")


def _dims(mesh: ProcMesh, dims: Any) -> tuple[str, ...]:
    names = (dims,) if isinstance(dims, str) else tuple(dims)
    labels = placement_of(mesh).shape.labels
    if not names:
        return tuple(labels)
    for name in names:
        if name not in labels:
            raise KeyError(f"dimension {name!r} is not in {mesh!r} (it has {list(labels)})")
    if len(set(names)) != len(names):
        raise ValueError(f"reducing the same dimension twice: {names}")
    return names


def reduce(
    tensor: Tensor,
    dims: Any,
    reduction: str = "sum",
    scatter: bool = False,
    mesh: Any = None,
    inplace: bool = False,
    out: Tensor | None = None,
) -> Tensor:
    """The collective `Tensor.reduce` describes."""
    if mesh is not None:
        raise NotImplementedError("reduce(mesh=...) is not supported; reduce, then to_mesh")
    if not isinstance(tensor, Tensor):
        raise TypeError(f"reduce takes a danaus.Tensor, not {type(tensor).__name__}")
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction {reduction!r} is not one of {REDUCTIONS}")
    if tensor.dropped:
        raise TensorUsageError(f"{tensor!r} was dropped and cannot be used")
    home = tensor._mesh
    names = _dims(home, dims)
    if len(names) > 1 and (reduction == "stack" or scatter):
        raise ValueError(f"reduction {reduction!r} with scatter={scatter} takes one dimension")
    if torch.is_grad_enabled() and tensor.requires_grad:
        raise TensorUsageError(
            f"{tensor!r} requires grad, and reduce is not differentiable: reduce gradients, "
            "or call it under torch.no_grad()"
        )
    on = stream.get_active_stream()
    if tensor._stream is not on:
        raise TensorUsageError(f"{tensor!r} is on {tensor._stream}, but {on} is active")
    access = tensor._storage.access
    if "r" not in access or (inplace and "w" not in access):
        raise TensorUsageError(f"{tensor!r} is lent to another stream; drop the borrow first")
    size = home.size(names)
    sizes = list(tensor.shape)
    if scatter and (not sizes or sizes[0] != size):
        raise ValueError(
            f"reduce with scatter=True needs the tensor's first dimension to be the group's "
            f"size ({size}), not {sizes[:1]}"
        )
    if inplace and (scatter or reduction == "stack"):
        raise ValueError(f"reduction {reduction!r} with scatter={scatter} cannot be in place")
    if reduction == "stack" and not scatter:
        sizes = [size, *sizes]
    elif reduction != "stack" and scatter:
        sizes = sizes[1:]
    engine = tensor._engine
    group = engine.group_id(home, names)
    if inplace:
        engine.record(home, on, (commands.REDUCE, group, tensor._id, None, reduction, scatter))
        return tensor
    meta = contiguous_meta(sizes, tensor.dtype, tensor.device)
    if out is not None:
        if list(out.shape) != sizes:
            raise ValueError(f"out has shape {list(out.shape)}; the result's is {sizes}")
        engine.record(
            home, on, (commands.REDUCE, group, tensor._id, out._id, reduction, scatter), traced=True
        )
        return out
    result = engine.handle(home, on, meta, Storage())
    engine.record(
        home, on, (commands.REDUCE, group, tensor._id, result._id, reduction, scatter), traced=True
    )
    return result


def reduce_tree(
    tensors: T,
    dims: Any,
    reduction: str = "sum",
    scatter: bool = False,
    mesh: Any = None,
    _inplace: bool = False,
) -> T:
    """`Tensor.reduce` for each tensor of a structure (``danaus.reduce``)."""
    return pytree.tree_map(
        lambda t: (
            reduce(t, dims, reduction, scatter, mesh, _inplace) if isinstance(t, Tensor) else t
        ),
        tensors,
    )


def reduce_(
    tensors: T, dims: Any, reduction: str = "sum", scatter: bool = False, mesh: Any = None
) -> T:
    """`reduce_tree` in place."""
    return reduce_tree(tensors, dims, reduction, scatter, mesh, _inplace=True)
