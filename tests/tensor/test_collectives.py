"""Collectives over mesh dimensions: reduce, reduce_ and process groups (item 3)."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

import danaus
from danaus import this_host
from danaus.tensor import TensorUsageError
from tests.tensor.helpers import process_group_count


@danaus.remote(propagate=lambda t, group: t)
def all_reduce_in_function(t: torch.Tensor, group: dist.ProcessGroup) -> torch.Tensor:
    """A remote function that calls torch.distributed itself, on the group it was given."""
    out = t.clone()
    dist.all_reduce(out, group=group)
    return out


def test_reductions_over_dimensions(run, transport):
    def main():
        mesh = this_host().spawn_procs({"host": 2, "gpu": 2})
        with mesh.activate():
            # Each proc's value is its rank: host * 2 + gpu, in float, so that sums are exact.
            x = mesh.rank_tensor(("host", "gpu")).float() * torch.ones(2) + torch.arange(2.0)
            results = {
                "sum_gpu": x.reduce("gpu", "sum"),
                "avg_host": x.reduce("host", "avg"),
                "max_all": x.reduce(("host", "gpu"), "max"),
                "min_gpu": x.reduce("gpu", "min"),
                "product_gpu": (x + 1).reduce("gpu", "product"),
                "stack_gpu": x.reduce("gpu", "stack"),
                "scatter_gpu": x.reduce("gpu", "sum", scatter=True),
                "to_all_gpu": x.reduce("gpu", "stack", scatter=True),
                "tree": danaus.reduce({"a": x, "b": [x * 2]}, "host", "sum"),
            }
            y = x.clone()
            same = y.reduce_("gpu", "sum")
            results["in_place"] = y
            danaus.reduce_([x], "host", "sum")
            results["tree_in_place"] = x
            results["in_function"] = all_reduce_in_function(
                mesh.rank_tensor("gpu").float(), mesh.process_group("gpu")
            )
        shards = {
            (h, g): danaus.inspect(results, host=h, gpu=g) for h in range(2) for g in range(2)
        }
        with mesh.activate():
            groups = list(process_group_count.call().get().values())
        return shards, same is y, groups

    shards, in_place_returns_itself, groups = run(main)
    assert in_place_returns_itself
    # One gloo group per set of dimensions (gpu, host, both), however many reductions use it;
    # the simulator's collectives are messages, with no process group.
    assert groups == [3 if transport.real else 0] * 4
    base = torch.arange(2.0)
    value = {(h, g): (h * 2 + g) + base for h in range(2) for g in range(2)}
    for (h, g), got in shards.items():
        row = [value[(h, 0)], value[(h, 1)]]
        column = [value[(0, g)], value[(1, g)]]
        assert torch.equal(got["sum_gpu"], row[0] + row[1])
        assert torch.equal(got["avg_host"], (column[0] + column[1]) / 2)
        assert torch.equal(got["max_all"], value[(1, 1)])
        assert torch.equal(got["min_gpu"], row[0])
        assert torch.equal(got["product_gpu"], (row[0] + 1) * (row[1] + 1))
        assert torch.equal(got["stack_gpu"], torch.stack(row))
        assert torch.equal(got["scatter_gpu"], (row[0] + row[1])[g])
        assert torch.equal(got["to_all_gpu"], torch.stack([row[0][g], row[1][g]]))
        assert torch.equal(got["tree"]["a"], column[0] + column[1])
        assert torch.equal(got["tree"]["b"][0], 2 * (column[0] + column[1]))
        assert torch.equal(got["in_place"], row[0] + row[1])
        assert torch.equal(got["tree_in_place"], column[0] + column[1])
        assert got["in_function"].item() == 1.0  # 0 + 1 over the gpu dimension


def test_invalid_reductions_are_refused_in_the_controller(sim):
    def main():
        mesh = this_host().spawn_procs({"gpu": 2})
        with mesh.activate():
            x = torch.ones(3)
            with pytest.raises(KeyError, match="host"):
                x.reduce("host")
            with pytest.raises(ValueError, match="median"):
                x.reduce("gpu", "median")
            with pytest.raises(ValueError, match="first dimension"):
                x.reduce("gpu", scatter=True)
            with pytest.raises(ValueError, match="in place"):
                x.reduce_("gpu", "stack")
            w = torch.ones(2, requires_grad=True)
            with pytest.raises(TensorUsageError, match="requires grad"):
                w.reduce("gpu")
        return True

    assert sim(main)
