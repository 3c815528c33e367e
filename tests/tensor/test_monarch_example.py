"""What Monarch's example ``distributed_tensors.py`` does, on a smaller mesh, checked.

The example itself (with its import renamed, "cuda" changed to "cpu" and its
search for the largest batch bounded) runs to the end on tcp and sim; this is
the suite's own program through the same features, in the same order, with
assertions: a mesh's table, tensors and ``inspect``/``show``, an operation on
them, a failure the procs survive and a search that depends on it, collectives
over one dimension and the other, renamed and split meshes, a pipeline over
slices, and data-parallel training whose gradients are reduced on a stream of
their own, first on a simulated mesh, then for real.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import danaus
from danaus import this_host
from tests.tensor.conftest import sim_and_tcp


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4))

    def forward(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(self.layers(x), target)


def train(model: nn.Module, x: torch.Tensor, target: torch.Tensor, comms: danaus.Stream) -> None:
    """The example's last DDP step: gradients one at a time, reduced on ``comms`` while the
    next are computed, each borrow handed back just before its parameter's update."""
    loss = model(x, target)
    parameters = list(reversed(list(model.parameters())))
    grads = danaus.grad_generator(loss, parameters)
    with torch.no_grad():
        it = iter((p, g, *comms.borrow(g, mutable=True)) for p, g in zip(parameters, grads))
        todo = next(it, None)
        while todo is not None:
            parameter, grad, comm_grad, borrow = todo
            with comms.activate():
                comm_grad.reduce_("dp", "sum")
            todo = next(it, None)
            borrow.drop()
            parameter -= 0.01 * grad


@sim_and_tcp
def test_the_features_of_monarchs_example(run, capsys):
    def main():
        found = {}
        mesh = this_host().spawn_procs({"gpu": 2})
        found["table"] = mesh.to_table()
        with mesh.activate():
            t = torch.rand(3, 4)
            product = t @ t.T
        danaus.show(t, gpu=1)
        found["symmetric"] = torch.allclose(danaus.inspect(product), danaus.inspect(product).T)
        with mesh.activate():
            big = torch.rand(4, 1024**4 * 8)  # more than any proc can allocate
            v = t @ big.T[:4]
        with pytest.raises(danaus.RemoteTensorError):
            danaus.inspect(v)
        del big
        sizes = []
        for n in (1, 2, 4):  # the example's search for the largest batch, bounded
            with mesh.activate():
                batch = torch.rand(n, 1024)
            sizes.append(int(danaus.inspect(batch.sum() > 0)))
        found["sizes"] = sizes
        remote_mesh = this_host().spawn_procs({"host": 2, "gpu": 2})
        with remote_mesh.activate():
            eg = torch.ones(3, 4) * remote_mesh.rank_tensor(("host", "gpu"))
            by_gpu = eg.reduce("gpu", "sum")
            by_host = eg.reduce("host", "sum")
        found["reduced"] = (
            danaus.inspect(by_gpu, host=1)[0, 0].item(),
            danaus.inspect(by_host, gpu=1)[0, 0].item(),
        )
        found["tables"] = (
            remote_mesh.rename(host="dp", gpu="tp").to_table(),
            remote_mesh.split(host=("dp", "pp"), gpu=("tp",), pp=2).to_table(),
        )
        pipeline = remote_mesh.rename(host="pp")
        stages_meshes = [pipeline.slice(pp=i) for i in range(2)]
        stages = []
        for stage_mesh in stages_meshes:
            with stage_mesh.activate():
                stages.append(nn.Sequential(nn.Linear(4, 4), nn.ReLU()))
        with stages_meshes[0].activate():
            x = torch.rand(3, 4)
        with torch.no_grad():
            for stage_mesh, stage in zip(stages_meshes, stages):
                x = x.to_mesh(stage_mesh)
                with stage_mesh.activate():
                    x = stage(x)
        found["pipeline"] = (tuple(danaus.inspect(x).shape), x.mesh is stages_meshes[1])
        comms = danaus.Stream("comms")
        simulator = danaus.Simulator(hosts=1, gpus=2)
        with simulator.mesh.rename(gpu="dp").activate():
            model = Net()
            train(model, torch.rand(3, 4), torch.full((3,), 1, dtype=torch.int64), comms)
            found["simulated"] = simulator.render()
        dp = mesh.rename(gpu="dp")
        with dp.activate():
            danaus.random.manual_seed(0)
            model = Net()
            before = [p.detach().clone() for p in model.parameters()]
            train(model, torch.rand(3, 4), torch.full((3,), 1, dtype=torch.int64), comms)
            moved = [(p - b).abs().sum() for p, b in zip(model.parameters(), before)]
        found["trained"] = [danaus.inspect(moved, dp=d) for d in range(2)]
        return found

    found = run(main)
    assert found["table"].splitlines()[-1].split("|")[1].split() == ["0:0", "0:1"]
    assert "tensor([[" in capsys.readouterr().out
    assert found["symmetric"]
    assert found["sizes"] == [1, 1, 1]
    assert found["reduced"] == (5.0, 4.0)  # 2 + 3 along gpu on host 1; 1 + 3 along host
    assert (
        "dp |" in found["tables"][0]
        and "dp=0" in found["tables"][1]
        and "pp |" in found["tables"][1]
    )
    assert found["pipeline"] == ((3, 4), True)
    assert "comms |" in found["simulated"] and "=" in found["simulated"]
    first, second = found["trained"]
    assert all(a.item() > 0 for a in first) and all(
        torch.equal(a, b) for a, b in zip(first, second)
    )
