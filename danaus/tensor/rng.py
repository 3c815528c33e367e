"""Each proc's torch generator: seeded from the run's seed, its mesh and rank; set and read here.

When a mesh is first activated, every proc seeds its generator from the run's
seed (the simulator's, 0 on real transports), its proc mesh and its rank, so
that ``torch.rand`` draws different values on each proc, and the same values
run after run. These remote functions change that on every proc of the active
mesh (``danaus.random``).
"""

from __future__ import annotations

import os

import torch

from danaus.core.actor_mesh import placement_of
from danaus.core.context import context
from danaus.tensor.remote import remote


def _state_like() -> torch.Tensor:
    return torch.empty_like(torch.get_rng_state())


@remote(propagate=lambda seed: None)
def manual_seed(seed: int) -> None:
    """Seed every proc's generator with ``seed``: they all draw the same values from now on."""
    torch.manual_seed(seed)


@remote(propagate=lambda seed: None)
def seed_by_rank(seed: int) -> None:
    """Seed every proc's generator from ``seed`` and its rank: they draw different values."""
    from danaus.tensor.worker import proc_seed

    instance = context().actor_instance
    torch.manual_seed(proc_seed(seed, placement_of(instance.proc_mesh).mesh_id, instance.rank.rank))


@remote(propagate=lambda: _state_like())
def get_state() -> torch.Tensor:
    """Each proc's generator state, as a tensor on the mesh (a ``torch.uint8`` vector)."""
    return torch.get_rng_state()


@remote(propagate=lambda state: None)
def set_state(state: torch.Tensor) -> None:
    """Set each proc's generator state to its shard of ``state`` (from `get_state`)."""
    torch.set_rng_state(state)


@remote(propagate=lambda: None)
def make_deterministic() -> None:
    """Make torch on every proc choose deterministic algorithms (and cuBLAS a fixed workspace)."""
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
