"""CUDA tensors on a mesh, where a GPU exists: the same engine, NCCL for collectives."""

from __future__ import annotations

import pytest
import torch

import danaus
from danaus import context, this_host

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
needs_two = pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="needs two CUDA GPUs"
)


@danaus.remote(propagate=lambda: None)
def use_own_gpu() -> None:
    """Each proc of the mesh on a GPU of its own (NCCL needs one per rank)."""
    torch.cuda.set_device(context().actor_instance.rank.rank % torch.cuda.device_count())


@needs_cuda
def test_cuda_tensors_compute_on_the_procs_and_come_back_to_the_cpu(run):
    def main():
        mesh = this_host().spawn_procs({"gpu": 1})
        with mesh.activate():
            use_own_gpu()
            t = torch.ones(4, device="cuda") * 3
            device = t.device.type
        return device, danaus.inspect(t)

    device, value = run(main)
    assert device == "cuda"
    assert value.device.type == "cpu" and value.tolist() == [3.0] * 4


@needs_two
def test_cuda_collectives_and_moves_run_on_nccl_and_the_transport(run):
    def main():
        mesh = this_host().spawn_procs({"gpu": 2})
        with mesh.activate():
            use_own_gpu()
            t = torch.ones(4, device="cuda") * (mesh.rank_tensor("gpu").to("cuda") + 1)
            total = t.reduce("gpu", "sum")
        moved = t.slice_mesh(gpu=1).to_mesh(mesh.slice(gpu=slice(0, 1)))
        return danaus.inspect(total, gpu=0), danaus.inspect(moved)

    total, moved = run(main)
    assert total.tolist() == [3.0] * 4
    assert moved.tolist() == [2.0] * 4
