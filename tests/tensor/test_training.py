"""Autograd and training on a mesh: backward and optimizer steps run on the procs (item 2)."""

from __future__ import annotations

import torch
from torch import nn

import danaus
from danaus import this_host

STEPS, RANKS, BATCH = 20, 4, 8


def data() -> tuple[torch.Tensor, torch.Tensor]:
    """Each step's inputs and targets for each rank: ``[step, rank, batch, features]``."""
    generator = torch.Generator().manual_seed(1)
    inputs = torch.randn(STEPS, RANKS, BATCH, 4, generator=generator)
    weights = torch.randn(4, 2, generator=generator)
    targets = inputs @ weights + 0.1 * torch.randn(STEPS, RANKS, BATCH, 2, generator=generator)
    return inputs, targets


def model() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


def one_process(initial: dict[str, torch.Tensor]) -> list[float]:
    """The same model on the whole batch of every rank at once, in one process."""
    net = model()
    net.load_state_dict(initial)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    inputs, targets = data()
    losses = []
    for step in range(STEPS):
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(
            net(inputs[step].reshape(-1, 4)), targets[step].reshape(-1, 2)
        )
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def test_data_parallel_training_matches_one_process(run):
    torch.manual_seed(0)
    initial = model().state_dict()
    inputs, targets = data()

    def main():
        mesh = this_host().spawn_procs({"dp": RANKS})
        with mesh.activate():
            net = model()
            net.load_state_dict(initial)  # every rank starts from the same weights
            optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
            rank = mesh.rank_tensor("dp")
            losses = []
            for step in range(STEPS):
                x = inputs[step].index_select(0, rank.reshape(1)).squeeze(0)
                y = targets[step].index_select(0, rank.reshape(1)).squeeze(0)
                optimizer.zero_grad()
                loss = nn.functional.mse_loss(net(x), y)
                loss.backward()  # the backward pass runs on the procs
                with torch.no_grad():
                    for parameter in net.parameters():
                        parameter.grad.reduce_("dp", "avg")
                optimizer.step()
                losses.append(loss.detach().reduce("dp", "avg"))
            grads_are_handles = all(isinstance(p.grad, danaus.Tensor) for p in net.parameters())
            return danaus.inspect(losses, dp=3), grads_are_handles

    losses, grads_are_handles = run(main)
    assert grads_are_handles
    expected = one_process(initial)
    assert max(abs(float(a) - b) for a, b in zip(losses, expected)) < 1e-5
    assert expected[-1] < expected[0] / 2
