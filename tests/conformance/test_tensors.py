"""Tensors an actor receives are its own: writable, with no warning, aliasing nothing."""

from __future__ import annotations

import warnings

import pytest

from danaus import Actor, endpoint, this_host

torch = pytest.importorskip("torch")


class Holder(Actor):
    """Keeps what it was spawned with, like a model's state dict."""

    def __init__(self, state: dict) -> None:
        self.state = state

    @endpoint
    def train_in_place(self) -> dict:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # "The given buffer is not writable" would raise here
            for tensor in self.state.values():
                tensor.add_(1)
            return {name: float(t.sum()) for name, t in self.state.items()}

    @endpoint
    def receive(self, a, b) -> tuple[float, float]:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            a.mul_(10)
        return float(a.sum()), float(b.sum())


@pytest.mark.parametrize("size", [16, 64 * 1024, 8 * 1024 * 1024])
def test_received_tensors_are_writable(run_with_torch, size):
    def main():
        state = {"weight": torch.zeros(size // 4), "bias": torch.ones(4)}
        holder = this_host().spawn_procs({"h": 1}).spawn("holder", Holder, state)
        sums = holder.train_in_place.call_one().get(timeout=60)
        return sums, float(state["weight"].sum()), float(state["bias"].sum())

    sums, sender_weight, sender_bias = run_with_torch(main)
    assert sums == {"weight": float(size // 4), "bias": 8.0}
    assert (sender_weight, sender_bias) == (0.0, 4.0), "the sender's tensors are untouched"


def test_received_tensors_alias_neither_each_other_nor_the_sender(run_with_torch):
    def main():
        base = torch.ones(2 * 65536)
        a, b = base[:65536], base[65536:]
        holder = this_host().spawn_procs({"h": 1}).spawn("holder", Holder, {})
        return holder.receive.call_one(a, b).get(timeout=60), float(base.sum())

    (a_sum, b_sum), sender_sum = run_with_torch(main)
    assert (a_sum, b_sum) == (655360.0, 65536.0)
    assert sender_sum == 131072.0
