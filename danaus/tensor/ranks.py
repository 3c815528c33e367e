"""``ProcMesh.rank_tensor``: each proc's coordinates, as a tensor on the mesh."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from danaus.core.actor_mesh import placement_of
from danaus.core.context import context
from danaus.core.mesh import ProcMesh
from danaus.tensor.active import Activated
from danaus.tensor.handle import Tensor
from danaus.tensor.remote import remote


@remote(propagate=lambda labels, ranks, sizes: torch.zeros((), dtype=torch.long))
def _rank(labels: tuple[str, ...], ranks: tuple[int, ...], sizes: tuple[int, ...]) -> torch.Tensor:
    """This proc's rank within the dimensions ``labels`` of a shape whose members are ``ranks``."""
    index = ranks.index(context().actor_instance.rank.rank)
    coords = []
    for size in reversed(sizes):
        index, coordinate = divmod(index, size)
        coords.append(coordinate)
    point = dict(zip(labels, reversed(coords)))
    return torch.tensor(point["_rank"], dtype=torch.long)


def rank_tensor(mesh: ProcMesh, dims: str | Sequence[str]) -> Tensor:
    """A tensor whose shard on each proc of ``mesh`` is its rank along ``dims``."""
    names = (dims,) if isinstance(dims, str) else tuple(dims)
    shape = placement_of(mesh).shape
    for name in names:
        if name not in shape.labels:
            raise KeyError(f"{mesh!r} has no dimension {name!r}")
    rank = None
    for name in names:
        with Activated(mesh):
            here = _rank(*_one_dim(mesh, name))
            rank = here if rank is None else rank * mesh.size(name) + here
    return rank


def _one_dim(mesh: ProcMesh, name: str) -> tuple[tuple[str, ...], tuple[int, ...], tuple[int, ...]]:
    shape = placement_of(mesh).shape
    labels = tuple("_rank" if label == name else label for label in shape.labels)
    return labels, tuple(shape.ranks()), tuple(shape.ndslice.sizes)
