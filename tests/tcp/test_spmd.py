"""torch.distributed inside a mesh: gloo all_reduce over 4 procs after setup_torch_elastic_env."""

from __future__ import annotations

import os
import sys

import pytest

from danaus import Actor, endpoint, this_host
from danaus.spmd import setup_torch_elastic_env


class Reducer(Actor):
    """Joins the process group torchrun's variables describe, as a torchrun script would."""

    @endpoint
    def torch_was_imported(self) -> bool:
        return "torch" in sys.modules

    @endpoint
    def all_reduce(self) -> tuple[float, int, int, str]:
        import torch
        import torch.distributed as dist

        dist.init_process_group("gloo")
        try:
            value = torch.tensor([float(dist.get_rank() + 1)])
            dist.all_reduce(value)
            return value.item(), dist.get_rank(), dist.get_world_size(), os.environ["LOCAL_RANK"]
        finally:
            dist.destroy_process_group()


@pytest.mark.timeout(300)
def test_gloo_all_reduce_over_four_procs(tcp):
    tcp()
    procs = this_host().spawn_procs({"gpus": 4})
    setup_torch_elastic_env(procs)
    reducers = procs.spawn("reducers", Reducer)
    assert not any(reducers.torch_was_imported.call().get().values())
    results = list(reducers.all_reduce.call().get(timeout=240).values())
    assert results == [(10.0, rank, 4, str(rank)) for rank in range(4)]
