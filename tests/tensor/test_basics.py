"""Tensors on a mesh: operations written in the controller run on every proc (item 1)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import danaus
from danaus import this_host
from tests.tensor.conftest import sim_and_tcp
from tests.tensor.helpers import proc_rank, shard_count


def test_operations_run_on_every_proc(run):
    def main():
        mesh = this_host().spawn_procs({"gpu": 2})
        with mesh.activate():
            rank = mesh.rank_tensor("gpu").float()
            x = torch.arange(6.0).reshape(2, 3) + rank  # creation, arithmetic
            x.mul_(2)  # in place
            linear = nn.Linear(3, 2)
            with torch.no_grad():
                linear.weight.fill_(1.0)
                linear.bias.zero_()
            y = linear(x)  # nn.Module forward
            local = {"shape": tuple(y.shape), "dtype": y.dtype, "device": y.device.type}
            local["handle"] = isinstance(y, danaus.Tensor) and isinstance(x, danaus.Tensor)
        firsts = danaus.inspect(y, gpu=0)
        seconds = danaus.fetch_shard({"x": x, "y": y, "n": 3}, {"gpu": 1}).get()
        return local, firsts, seconds

    local, firsts, seconds = run(main)
    assert local == {"shape": (2, 2), "dtype": torch.float32, "device": "cpu", "handle": True}
    x0 = torch.arange(6.0).reshape(2, 3) * 2
    assert torch.equal(firsts, x0.sum(1, keepdim=True).expand(2, 2))
    assert torch.equal(seconds["x"], x0 + 2)
    assert torch.equal(seconds["y"], (x0 + 2).sum(1, keepdim=True).expand(2, 2))
    assert seconds["n"] == 3


@sim_and_tcp
def test_activating_a_slice_anywhere_and_reshaped_meshes(run):
    """A slice that does not start at offset 0 activates (Monarch 0.7.0 refuses it)."""

    def main():
        mesh = this_host().spawn_procs({"host": 2, "gpu": 2})
        corner = mesh.slice(host=1, gpu=slice(1, 2))
        with corner.activate():
            t = torch.full((2,), 7.0) * corner.rank_tensor("gpu")
            where = proc_rank.call().get()
        flat = mesh.flatten("all")
        with flat.activate():
            ranks = flat.rank_tensor("all")
        split = mesh.split(host=("dp", "pp"), pp=1)
        with split.activate():
            dp = split.rank_tensor("dp")
        renamed = mesh.rename(gpu="tp")
        with renamed.activate():
            tp = renamed.rank_tensor("tp") + 100
        return (
            list(where.values()),
            danaus.inspect(t).tolist(),
            [danaus.inspect(ranks, all=i).item() for i in range(4)],
            [danaus.inspect(dp, dp=d, gpu=1).item() for d in range(2)],
            danaus.inspect(tp, host=1, tp=1).item(),
        )

    where, values, ranks, dp, tp = run(main)
    assert where == [3]
    assert values == [0.0, 0.0]
    assert ranks == [0, 1, 2, 3]
    assert dp == [0, 1]
    assert tp == 101


def test_no_mesh_and_the_active_mesh(sim):
    def main():
        mesh = this_host().spawn_procs({"gpu": 2})
        with pytest.raises(ValueError, match="no mesh is active"):
            danaus.get_active_mesh()
        with mesh.activate():
            active = danaus.get_active_mesh()
            remote = torch.ones(2)
            with danaus.no_mesh.activate():
                local = torch.ones(2) * 3
                inner = None
                with pytest.raises(ValueError):
                    inner = danaus.get_active_mesh()
            again = danaus.get_active_mesh()
        return active is mesh, again is mesh, inner, type(remote), type(local), local.sum().item()

    assert sim(main) == (True, True, None, danaus.Tensor, torch.Tensor, 6.0)


def test_dropped_handles_free_their_shards_in_batches(sim):
    def main():
        mesh = this_host().spawn_procs({"gpu": 2})
        with mesh.activate():
            before = shard_count.call().get()
            handles = [torch.ones(4) * i for i in range(50)]
            during = shard_count.call().get()
            engine = handles[0]._engine
            del handles
            pending = len(engine._drops)  # freed with the next batch, not one message each
            after = shard_count.call().get()
        return list(before.values()), list(during.values()), pending, list(after.values())

    before, during, pending, after = sim(main)
    # Each ``torch.ones(4)`` was dropped as soon as multiplied: only the products remain.
    assert [d - b for b, d in zip(before, during)] == [50, 50]
    assert pending == 50
    assert after == before


def test_values_reach_the_controller_only_when_asked(sim):
    """Operations send nothing back: the engine's messages to the procs are the only ones."""

    def main():
        mesh = this_host().spawn_procs({"gpu": 2})
        with mesh.activate():
            t = torch.zeros(16)
            danaus.inspect(t)
            runtime = t._engine.runtime
            ports = len(runtime._ports)
            for _ in range(200):
                t = t + 1
            opened = len(runtime._ports) - ports
            value = danaus.inspect(t)
        return opened, value

    opened, value = sim(main)
    assert opened == 0
    assert torch.equal(value, torch.full((16,), 200.0))


def test_values_read_in_the_controller_are_refused(sim):
    def main():
        mesh = this_host().spawn_procs({"gpu": 1})
        with mesh.activate():
            t = torch.ones(())
            with pytest.raises(RuntimeError, match=r"danaus\.inspect"):
                float(t)
            with pytest.raises(TypeError, match="cannot be pickled"):
                import pickle

                pickle.dumps(t)
        return True

    assert sim(main)
