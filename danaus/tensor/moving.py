"""Tensors between meshes: ``Tensor.to_mesh``, ``Tensor.slice_mesh`` and their tree forms.

``t.to_mesh(other)`` records two commands: a `SEND` for the procs that hold
``t`` and a `RECV` for the procs of ``other``, each naming the other side's
procs and workers; the data then goes proc to proc (`danaus.tensor.transfers`).
Dimensions match by name. Along a dimension of the destination that the
source lacks, every proc of it receives the same shard (a broadcast).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils import _pytree as pytree

from danaus.core.actor_mesh import placement_of
from danaus.core.mesh import ProcMesh
from danaus.tensor import commands
from danaus.tensor.errors import TensorUsageError
from danaus.tensor.fetch import root_rank
from danaus.tensor.handle import Storage, Tensor
from danaus.tensor.propagate import contiguous_meta
from danaus.tensor.stream import Stream


class MeshSliceTensor:
    """The shards of a tensor on some of its procs (``t.slice_mesh(...)``), for ``to_mesh``."""

    def __init__(self, tensor: Tensor, slicing: ProcMesh) -> None:
        self.tensor = tensor
        self.slicing = slicing

    def to_mesh(self, mesh: Any, stream: Stream | None = None) -> Tensor:
        """These shards, moved to ``mesh``; see ``Tensor.to_mesh``."""
        from danaus.tensor.engine import engine_of

        tensor = self.tensor
        if not isinstance(mesh, ProcMesh):
            raise TypeError(f"to_mesh takes a ProcMesh (or a slice of one), not {mesh!r}")
        if tensor.dropped:
            raise TensorUsageError(f"{tensor!r} was dropped and cannot be used")
        if torch.is_grad_enabled() and tensor.requires_grad:
            raise TensorUsageError(
                f"{tensor!r} requires grad, and to_mesh is not differentiable: call it under "
                "torch.no_grad(), or detach the tensor"
            )
        if "r" not in tensor._storage.access:
            raise TensorUsageError(f"{tensor!r} is lent mutably to another stream")
        sends, sources = _pairs(self.slicing, mesh)
        source_engine = tensor._engine
        engine = engine_of(mesh)
        transfer = engine.runtime.new_id()
        stream = stream or tensor._stream
        source_engine.record(
            self.slicing,  # the procs that send: the others of the tensor's mesh have no part
            tensor._stream,
            (commands.SEND, transfer, tensor._id, sends, engine.workers),
            traced=True,
        )
        result = engine.handle(
            mesh,
            stream,
            contiguous_meta(tuple(tensor.shape), tensor.dtype, tensor.device),
            Storage(),
        )
        engine.record(
            mesh,
            stream,
            (
                commands.RECV,
                transfer,
                result._id,
                sources,
                tuple(tensor.shape),
                tensor.dtype,
                source_engine.workers,
            ),
            traced=True,
        )
        return result


def _pairs(source: ProcMesh, dest: ProcMesh) -> tuple[dict[int, tuple[int, ...]], dict[int, int]]:
    """Which source proc sends to which destination procs (by position in their proc lists)."""
    src_shape, dst_shape = placement_of(source).shape, placement_of(dest).shape
    for label in src_shape.labels:
        if label not in dst_shape.labels and source.size(label) != 1:
            raise ValueError(
                f"dimension {label!r} of the source is not in {dest!r}; slice it out first "
                f"(t.slice_mesh({label}=...))"
            )
    for label in dst_shape.labels:
        if label in src_shape.labels and source.size(label) != dest.size(label):
            raise ValueError(
                f"dimension {label!r} has size {source.size(label)} in the source and "
                f"{dest.size(label)} in {dest!r}"
            )
    sends: dict[int, list[int]] = {}
    sources: dict[int, int] = {}
    ranks = dst_shape.ranks()
    for index in range(len(dst_shape)):
        point = dst_shape.point(index)
        coords = {label: point[label] for label in src_shape.labels if label in point}
        src = root_rank(src_shape, coords)
        sources[ranks[index]] = src
        sends.setdefault(src, []).append(ranks[index])
    return {src: tuple(dsts) for src, dsts in sends.items()}, sources


def to_mesh(tensors: Any, mesh: ProcMesh, stream: Stream | None = None) -> Any:
    """Every tensor of a structure, moved to ``mesh`` (see ``Tensor.to_mesh``)."""
    return pytree.tree_map(
        lambda t: t.to_mesh(mesh, stream) if isinstance(t, (Tensor, MeshSliceTensor)) else t,
        tensors,
        is_leaf=lambda t: isinstance(t, MeshSliceTensor),
    )


def slice_mesh(tensors: Any, **dims: int | slice) -> Any:
    """Every tensor of a structure, limited to some of its procs (see ``Tensor.slice_mesh``)."""
    return pytree.tree_map(lambda t: t.slice_mesh(**dims) if isinstance(t, Tensor) else t, tensors)
