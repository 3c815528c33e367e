"""Remote functions and each proc's random numbers (item 4)."""

from __future__ import annotations

import pytest
import torch

import danaus
import danaus.random
from danaus import this_host
from tests.tensor.conftest import sim_and_tcp


@danaus.remote(propagate=lambda x, offset: (x, torch.empty(x.shape[0], dtype=torch.long)))
def shifted_and_argmax(x: torch.Tensor, offset: float) -> tuple[torch.Tensor, torch.Tensor]:
    return x + offset, x.argmax(dim=1)


@danaus.remote
def normalized(x: torch.Tensor) -> torch.Tensor:
    """No propagate: its result's shape comes from running it on meta tensors."""
    return (x - x.mean()) / (x.std() + 1)


@danaus.remote(propagate="inspect")
def describe(x: torch.Tensor, label: str) -> dict:
    return {"label": label, "sum": float(x.sum()), "shape": tuple(x.shape)}


def test_remote_functions(run):
    def main():
        mesh = this_host().spawn_procs({"gpu": 2})
        by_path = danaus.remote("tests.tensor.helpers.scaled_sum")
        with mesh.activate():
            x = torch.arange(6.0).reshape(2, 3) + mesh.rank_tensor("gpu")
            shifted, argmax = shifted_and_argmax(x, 10.0)
            n = normalized(x)
            scaled, total = by_path(x, 2.0)
            answers = describe.call(x, "x").get()
            metadata = (tuple(argmax.shape), argmax.dtype, tuple(n.shape), tuple(total.shape))
        return (
            metadata,
            danaus.inspect((shifted, argmax, n, scaled, total), gpu=1),
            [answers.item(gpu=g) for g in range(2)],
        )

    metadata, (shifted, argmax, n, scaled, total), answers = run(main)
    x1 = torch.arange(6.0).reshape(2, 3) + 1
    assert metadata == ((2,), torch.long, (2, 3), ())
    assert torch.equal(shifted, x1 + 10)
    assert torch.equal(argmax, torch.tensor([2, 2]))
    assert torch.allclose(n, (x1 - x1.mean()) / (x1.std() + 1))
    assert torch.equal(scaled, x1 * 2) and total.item() == x1.sum().item()
    assert answers == [{"label": "x", "sum": 15.0 + 6 * g, "shape": (2, 3)} for g in range(2)]


@sim_and_tcp
def test_each_proc_draws_its_own_numbers_the_same_each_run(run):
    def main():
        mesh = this_host().spawn_procs({"gpu": 2})
        with mesh.activate():
            default = torch.rand(4)
            danaus.random.manual_seed(7)
            same = torch.rand(4)
            danaus.random.seed_by_rank(7)
            own = torch.rand(4)
            state = danaus.random.get_state()
            first = torch.rand(4)
            danaus.random.set_state(state)
            again = torch.rand(4)
        return [danaus.inspect((default, same, own, first, again), gpu=g) for g in range(2)]

    one, other = run(main)
    assert not torch.equal(one[0], other[0])  # ranks draw different values by default
    assert torch.equal(one[1], other[1])  # manual_seed: the same values on every rank
    assert torch.equal(one[1], torch.rand(4, generator=torch.Generator().manual_seed(7)))
    assert not torch.equal(one[2], other[2])
    assert torch.equal(one[3], one[4]) and torch.equal(other[3], other[4])  # state restored
    rerun = run(main)  # and every run draws the same
    assert all(torch.equal(a, b) for a, b in zip(one + other, rerun[0] + rerun[1]))


def test_remote_errors_in_the_controller(sim):
    def main():
        mesh = this_host().spawn_procs({"gpu": 2})
        with pytest.raises(RuntimeError, match="active mesh"):
            normalized(torch.ones(2))  # outside `with mesh.activate()`
        with pytest.raises(TypeError, match="function or"):
            danaus.remote(42)
        return mesh is not None

    assert sim(main)
