"""Remote functions the tensor tests use to look inside the procs."""

from __future__ import annotations

import torch

import danaus
from danaus import context


@danaus.remote(propagate="inspect")
def shard_count() -> int:
    """How many handles this proc's tensor worker holds a shard (or a failure) for."""
    return len(context().actor_instance.dispatch.obj._state.table)


@danaus.remote(propagate=lambda x: torch.empty((), dtype=torch.long))
def data_address(x: torch.Tensor) -> torch.Tensor:
    """Where this proc's shard of ``x`` keeps its data (to tell views from copies)."""
    return torch.tensor(x.untyped_storage().data_ptr())


@danaus.remote(propagate="inspect")
def proc_rank() -> int:
    """This proc's position in its whole proc mesh."""
    return context().actor_instance.rank.rank


def scaled_sum(x: torch.Tensor, factor: float) -> tuple[torch.Tensor, torch.Tensor]:
    """A plain function, run remotely by its path ("tests.tensor.helpers.scaled_sum")."""
    return x * factor, x.sum()


@danaus.remote(propagate="inspect")
def process_group_count() -> int:
    """How many torch.distributed process groups this proc's tensor worker has made."""
    return len(context().actor_instance.dispatch.obj._state.collectives._groups)
