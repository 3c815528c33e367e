"""The torch generators of the procs of the active mesh (the tensor engine's; needs torch).

with mesh.activate():
    danaus.random.manual_seed(0)      # every proc draws the same values
    state = danaus.random.get_state() # a tensor on the mesh: each proc's state
"""

from danaus.tensor.rng import get_state, make_deterministic, manual_seed, seed_by_rank, set_state

__all__ = ["get_state", "make_deterministic", "manual_seed", "seed_by_rank", "set_state"]
