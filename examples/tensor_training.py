"""Data-parallel training on the tensor engine that survives a rank crash, on the simulator.

Four ranks (two procs on each of two simulated hosts) train a small model; the
controller writes the training loop as if for one process. Every few steps it
fetches the model's state: its checkpoint. When a rank dies, the next
operation on the mesh raises; the controller stops what is left of the mesh,
spawns a new one, loads the last checkpoint and goes on from there. The data
of a step is a fixed function of the step and the rank, so the model it ends
with is the one an uninterrupted run gives, and the losses are too.

Run it (a fixed crash, then the same seed again, replayed identically):

    python examples/tensor_training.py --seed 3

or as a chaos scenario, under random crashes and slow links for each seed:

    danaus chaos run examples/tensor_training.py::DataParallelTraining --seeds 0:20
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import torch
from torch import nn

import danaus
import danaus.sim
from danaus import MeshFailure, SupervisionError, hosts
from danaus.chaos import History, Scenario, crash
from danaus.tensor import RemoteTensorError
from danaus.transports.sim.network import NetworkModel

STEPS = 24
CHECKPOINT_EVERY = 4
PROCS_PER_HOST = 2
LEARNING_RATE = 0.1


# --8<-- [start:model]
def model() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


def initial_state() -> dict[str, torch.Tensor]:
    """The same starting weights for every rank, and every run."""
    torch.manual_seed(0)
    return model().state_dict()


@danaus.remote(propagate=lambda step, rank: (torch.empty(8, 4), torch.empty(8, 2)))
def batch(step: int, rank: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Rank ``rank``'s inputs and targets at ``step``, made on its proc."""
    generator = torch.Generator().manual_seed(step * 1000 + int(rank))
    inputs = torch.randn(8, 4, generator=generator)
    targets = inputs @ torch.tensor([[1.0, -1.0], [0.5, 2.0], [-2.0, 0.0], [1.0, 1.0]])
    return inputs, targets


# --8<-- [end:model]


# --8<-- [start:step]
def train_step(
    net: nn.Module, optimizer: torch.optim.Optimizer, rank: torch.Tensor, step: int
) -> torch.Tensor:
    """One step on every rank: forward, backward, gradients averaged over the ranks, update."""
    inputs, targets = batch(step, rank)
    optimizer.zero_grad()
    loss = nn.functional.mse_loss(net(inputs), targets)
    loss.backward()
    with torch.no_grad():
        for parameter in net.parameters():
            parameter.grad.reduce_("dp", "avg")
    optimizer.step()
    return loss.detach().reduce("dp", "avg")


# --8<-- [end:step]


# --8<-- [start:loop]
@dataclass
class Checkpoint:
    step: int
    state: dict[str, torch.Tensor]


def train(crash_at: int | None = None) -> tuple[list[float], int]:
    """Train for `STEPS` steps; the losses, and how many times the mesh was replaced.

    ``crash_at``: kill rank 2 just after recording that step (a scripted fault;
    under ``danaus chaos``, the seed's faults strike instead).
    """
    checkpoint = Checkpoint(0, initial_state())
    losses: dict[int, float] = {}
    restarts = 0
    while checkpoint.step < STEPS:
        mesh = hosts().spawn_procs({"gpu": PROCS_PER_HOST}).flatten("dp")
        try:
            with mesh.activate():
                net = model()
                net.load_state_dict(checkpoint.state)
                optimizer = torch.optim.SGD(net.parameters(), lr=LEARNING_RATE)
                rank = mesh.rank_tensor("dp")
                pending = {}
                for step in range(checkpoint.step, STEPS):
                    pending[step] = train_step(net, optimizer, rank, step)
                    if step == crash_at and restarts == 0:
                        crash(mesh.slice(dp=2))
                    if (step + 1) % CHECKPOINT_EVERY == 0 or step + 1 == STEPS:
                        state, done = danaus.inspect((net.state_dict(), pending))
                        checkpoint = Checkpoint(step + 1, state)
                        losses.update({s: float(loss) for s, loss in done.items()})
                        pending = {}
        except (SupervisionError, RemoteTensorError):
            restarts += 1  # a rank died: start again from the last checkpoint
        finally:
            mesh.stop()
    return [losses[step] for step in range(STEPS)], restarts


# --8<-- [end:loop]


def one_process() -> list[float]:
    """The same training in one process on the whole batch of every step: the reference."""
    net = model()
    net.load_state_dict(initial_state())
    optimizer = torch.optim.SGD(net.parameters(), lr=LEARNING_RATE)
    ranks = PROCS_PER_HOST * 2
    losses = []
    for step in range(STEPS):
        parts = [batch._remote_impl(step, torch.tensor(r)) for r in range(ranks)]
        inputs = torch.cat([p[0] for p in parts])
        targets = torch.cat([p[1] for p in parts])
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(net(inputs), targets)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


# --8<-- [start:scenario]
class DataParallelTraining(Scenario):
    """Training under crashed procs and slow or delayed links: it ends, with the right losses."""

    hosts = 2
    network = NetworkModel(spawn_time=0.005)
    duration = 0.05  # simulated seconds: the whole training takes about as long
    settle = 5.0
    kinds = ("crash", "delay", "slow")

    def run(self, history: History) -> None:
        losses, restarts = train()  # the lost ranks are recorded by the chaos run
        history.record("trained", losses=losses, restarts=restarts)

    def check(self, history: History) -> list[str]:
        trained = next(history.of("trained"))
        expected = one_process()
        return [
            f"step {step}: loss {got} where one process has {want}"
            for step, (got, want) in enumerate(zip(trained["losses"], expected))
            if abs(got - want) > 1e-5
        ]


# --8<-- [end:scenario]


# --8<-- [start:main]
def simulate(seed: int, crash_at: int | None) -> danaus.sim.SimRun:
    def main() -> tuple[list[float], int, list[MeshFailure]]:
        failures: list[MeshFailure] = []
        danaus.unhandled_fault_hook = failures.append  # handled: the loop recovers
        losses, restarts = train(crash_at)
        return losses, restarts, failures

    return danaus.sim.run(main, hosts=2, seed=seed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--crash-at", type=int, default=9, help="the step rank 2 dies at")
    args = parser.parse_args()
    first = simulate(args.seed, args.crash_at)
    losses, restarts, failures = first.value
    lost = ", ".join(f"{dict(failure.rank)} ({failure.cause})" for failure in failures)
    print(f"trained {STEPS} steps with {restarts} restart(s); lost: {lost}")
    print("losses:", " ".join(f"{loss:.4f}" for loss in losses))
    worst = max(abs(a - b) for a, b in zip(losses, one_process()))
    print(f"largest difference from one process: {worst:.2e}")
    again = simulate(args.seed, args.crash_at)
    same = again.digest == first.digest and again.value[0] == losses
    print(f"seed {args.seed} replayed: trace {first.digest[:12]}, identical: {same}")


# --8<-- [end:main]


if __name__ == "__main__":
    main()
