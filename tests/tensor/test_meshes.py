"""Many meshes: tensors move between slices and between proc meshes, proc to proc (item 5)."""

from __future__ import annotations

import torch
from torch import nn

import danaus
from danaus import this_host
from danaus.core.mesh_table import mesh_table
from danaus.core.shape import Extent, Shape
from danaus.transports.sim.network import SimNetwork
from tests.tensor.conftest import sim_and_tcp
from tests.tensor.helpers import data_address


def test_tensors_move_between_slices_and_meshes(run):
    def main():
        mesh = this_host().spawn_procs({"pp": 2, "gpu": 2})
        other = this_host().spawn_procs({"gpu": 2})
        first, second = mesh.slice(pp=0), mesh.slice(pp=1)
        with first.activate():
            x = torch.arange(4.0) + 10 * first.rank_tensor("gpu")
        moved = x.to_mesh(second)  # between two slices of one proc mesh
        across = moved.to_mesh(other)  # between two proc meshes
        with other.activate():
            doubled = across * 2
        one = danaus.slice_mesh(x, gpu=1)  # one proc's shard, to every proc of a mesh
        broadcast = danaus.to_mesh(one, other)
        everywhere = x.slice_mesh(gpu=0).to_mesh(mesh)  # and along a new dimension
        return (
            [danaus.inspect(moved, gpu=g) for g in range(2)],
            [danaus.inspect(doubled, gpu=g) for g in range(2)],
            [danaus.inspect(broadcast, gpu=g) for g in range(2)],
            [danaus.inspect(everywhere, pp=p, gpu=g) for p in range(2) for g in range(2)],
            (moved.mesh is second, doubled.mesh is other),
        )

    moved, doubled, broadcast, everywhere, meshes = run(main)
    base = torch.arange(4.0)
    assert [m.tolist() for m in moved] == [base.tolist(), (base + 10).tolist()]
    assert [d.tolist() for d in doubled] == [(2 * base).tolist(), (2 * base + 20).tolist()]
    assert [b.tolist() for b in broadcast] == [(base + 10).tolist()] * 2
    assert [e.tolist() for e in everywhere] == [base.tolist()] * 4
    assert meshes == (True, True)


@sim_and_tcp
def test_a_pipeline_over_stages(run):
    """Monarch's pipelining example: a model split in stages, one per slice of a mesh."""

    def main():
        mesh = this_host().spawn_procs({"host": 2, "gpu": 2}).rename(host="pp")
        stages = [mesh.slice(pp=i) for i in range(2)]
        layers = []
        for stage in stages:
            with stage.activate():
                torch_stage = nn.Linear(4, 4)
                with torch.no_grad():
                    torch_stage.weight.copy_(torch.eye(4) * 2)
                    torch_stage.bias.fill_(1.0)
                layers.append(torch_stage)
        with stages[0].activate():
            x = torch.ones(3, 4)
        with torch.no_grad():
            for stage, layer in zip(stages, layers):
                x = x.to_mesh(stage)
                with stage.activate():
                    x = layer(x)
        return danaus.inspect(x, gpu=1), x.mesh is stages[1]

    out, on_last = run(main)
    assert on_last
    assert torch.equal(out, torch.full((3, 4), 7.0))  # (1 * 2 + 1) * 2 + 1


def test_moving_never_aliases_and_copies_proc_to_proc(sim):
    def main():
        mesh = this_host().spawn_procs({"gpu": 2})
        with mesh.slice(gpu=0).activate():
            x = torch.ones(8)
            here = data_address(x)
        moved = x.to_mesh(mesh.slice(gpu=1))
        with moved.mesh.activate():
            there = data_address(moved)
            moved.add_(1)
        return danaus.inspect(x), danaus.inspect(moved), danaus.inspect(here), danaus.inspect(there)

    x, moved, here, there = sim(main)
    assert x.tolist() == [1.0] * 8 and moved.tolist() == [2.0] * 8
    assert here.item() != there.item()


def test_the_data_of_a_move_never_passes_through_the_controller(sim, monkeypatch):
    """4 MiB move between procs (two slices, then another proc mesh, and a broadcast to
    two procs), while the controller's own messages and reads stay small."""
    through_controller: list[int] = []
    controller = []  # the controller's proc id, once main runs
    dispatch = SimNetwork.dispatch

    def counting(network, sender, message):
        if controller and controller[0] in (message.src, message.dst):
            through_controller.append(message.size)
        return dispatch(network, sender, message)

    monkeypatch.setattr(SimNetwork, "dispatch", counting)

    def main():
        controller.append(danaus.context().actor_instance.proc_id)
        mesh = this_host().spawn_procs({"gpu": 2})
        other = this_host().spawn_procs({"gpu": 2})
        with mesh.slice(gpu=0).activate():
            x = torch.ones(1024 * 1024)
        moved = x.to_mesh(mesh.slice(gpu=1)).to_mesh(other.slice(gpu=0))
        spread = moved.to_mesh(other)
        with other.activate():
            total = spread.sum()
        return [danaus.inspect(total, gpu=g).item() for g in range(2)]

    assert sim(main) == [1024.0 * 1024] * 2
    assert through_controller and max(through_controller) < 64 * 1024


def test_a_mesh_as_a_table():
    table = mesh_table(Shape.from_extent(Extent(["host", "gpu"], [2, 3])), str)
    assert table.splitlines() == [
        "     | gpu",
        "host | 0 1 2",
        "-----+------",
        "0    | 0 1 2",
        "1    | 3 4 5",
    ]
    assert mesh_table(
        Shape.from_extent(Extent(["gpu"], [2])), lambda at: f"0.{at}"
    ).splitlines() == [
        "gpu |   0   1",
        "----+--------",
        "    | 0.0 0.1",
    ]


def test_received_memory_is_reused_only_once_nothing_uses_it(sim):
    """A receiver reuses the memory of shards it received before (new pages are slow to
    fault in), but never that of a shard, or a view of one, still in use."""

    def main():
        mesh = this_host().spawn_procs({"gpu": 2})
        here, there = mesh.slice(gpu=slice(0, 1)), mesh.slice(gpu=slice(1, 2))
        with here.activate():
            x = torch.arange(262144.0)  # 1 MiB: memory of its own, not a small block's
        kept = x.to_mesh(there)
        with there.activate():
            view = kept[:2]
        del kept  # its view still uses its memory
        second = x.to_mesh(there)
        with there.activate():
            where = {name: data_address(t) for name, t in (("view", view), ("second", second))}
            second.mul_(10)
        del second  # nothing uses its memory any more
        third = (x + 1).to_mesh(there)
        with there.activate():
            where["third"] = data_address(third)
        found = {name: danaus.inspect(address).item() for name, address in where.items()}
        return found, danaus.inspect(view).tolist(), danaus.inspect(third[:3]).tolist()

    where, view, third = sim(main)
    assert where["second"] != where["view"]  # not over the view's memory
    assert where["third"] == where["second"]  # reused
    assert view == [0.0, 1.0] and third == [1.0, 2.0, 3.0]
