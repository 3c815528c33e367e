"""Data-parallel training with torch DDP over a mesh of 4 procs, surviving the loss of a rank.

The code of the tutorial in docs/ddp.md. Run it with ``python examples/ddp.py``
(transport tcp: gloo needs a process per rank; torch: ``pip install
'danaus[torch]'``). A driver actor owns the training procs; when a rank dies
mid-training, it is told, stops what is left of the mesh and starts a new one,
which goes on from the last checkpoint.
"""

from __future__ import annotations

import os
import sys
import tempfile
from datetime import timedelta

from danaus import Actor, MeshFailure, SupervisionError, endpoint, this_host
from danaus.spmd import setup_torch_elastic_env

# --8<-- [start:trainer]
FEATURES = 8
CHECKPOINT_EVERY = 5


class Trainer(Actor):
    """One rank of data-parallel training: a linear model, wrapped in DDP."""

    def __init__(self, checkpoint: str) -> None:
        import torch
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel

        # RANK, WORLD_SIZE, MASTER_ADDR... were set by setup_torch_elastic_env.
        dist.init_process_group("gloo", timeout=timedelta(seconds=30))
        self.rank = dist.get_rank()
        torch.manual_seed(0)
        self.model = DistributedDataParallel(torch.nn.Linear(FEATURES, 1))
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)
        self.checkpoint = checkpoint
        self.step = 0
        if os.path.exists(checkpoint):
            state = torch.load(checkpoint)
            self.model.module.load_state_dict(state["model"])
            self.optimizer.load_state_dict(state["optimizer"])
            self.step = state["step"]
        # Each rank draws its own shard of a regression problem y = x @ w + 1.
        generator = torch.Generator().manual_seed(self.rank)
        self.inputs = torch.randn(64, FEATURES, generator=generator)
        self.targets = self.inputs @ torch.arange(1.0, FEATURES + 1).unsqueeze(1) + 1

    @endpoint
    def train(
        self, until: int, die_at: int | None = None
    ) -> tuple[int, tuple[int, int, float]]:
        """Train up to step ``until``; rank 1 dies at step ``die_at`` (to show recovery).

        Returns this rank, and the first and last steps and the loss it trained with.
        """
        import torch

        started = self.step
        loss = torch.tensor(0.0)
        while self.step < until:
            if self.step == die_at and self.rank == 1:
                os._exit(1)  # as a crash would: no cleanup, no answer
            self.optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(self.model(self.inputs), self.targets)
            loss.backward()  # DDP averages the gradients of all ranks here
            self.optimizer.step()
            self.step += 1
            if self.rank == 0 and self.step % CHECKPOINT_EVERY == 0:
                self.save()
        return self.rank, (started, self.step, loss.item())

    def save(self) -> None:
        import torch

        state = {
            "model": self.model.module.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "step": self.step,
        }
        torch.save(state, self.checkpoint + ".tmp")
        os.replace(self.checkpoint + ".tmp", self.checkpoint)

    def __cleanup__(self, exc: BaseException | None) -> None:
        import torch.distributed as dist

        dist.destroy_process_group()


# --8<-- [end:trainer]


# --8<-- [start:driver]
MAX_RESTARTS = 3


class Driver(Actor):
    """Owns the training procs; restarts them from the last checkpoint when a rank fails."""

    def __init__(self, checkpoint: str) -> None:
        self.checkpoint = checkpoint
        self.failures: list[str] = []

    def __supervise__(self, failure: MeshFailure) -> bool:
        # A rank of the mesh this actor owns failed. Handled: `run` restarts it.
        self.failures.append(str(failure))
        return True

    @endpoint
    def run(self, until: int, die_at: int | None) -> list[tuple[int, int, float]]:
        attempts = []
        while True:
            procs = this_host().spawn_procs({"gpus": 4})
            setup_torch_elastic_env(procs)
            trainers = procs.spawn("trainers", Trainer, self.checkpoint)
            # Each rank's answer or error as it comes, until a rank's process is known to
            # have ended (this proc has then heard of it, and __supervise__ will be told)
            # or every rank has answered.
            ranks, errors = [], []
            answers = trainers.train.stream(until, die_at)
            for rank in answers:
                ranks.append(rank)
                if (error := rank.exception()) is not None:
                    errors.append(error)
                    if isinstance(error, SupervisionError):
                        break
            procs.stop(timeout=5).get()
            for rank in answers:  # the ranks not waited for have answered by now: read them
                if (error := rank.exception()) is not None:
                    errors.append(error)
            if not errors:
                attempts.append(dict(rank.get() for rank in ranks)[0])
                return attempts
            if len(attempts) == MAX_RESTARTS:  # it fails again and again: say why, once
                raise RuntimeError(f"training failed {len(attempts) + 1} times") from errors[0]
            kinds = ", ".join(sorted({type(error).__name__ for error in errors}))
            print(f"training failed: {kinds}; restarting", flush=True)
            die_at = None
            attempts.append(None)

    @endpoint
    def failed_ranks(self) -> list[str]:
        return self.failures


# --8<-- [end:driver]


# --8<-- [start:main]
def main(until: int = 20, die_at: int | None = 12) -> list[tuple[int, int, float]]:
    try:
        import torch  # noqa: F401  (the trainers need it: say so before starting anything)
    except ImportError as missing:
        raise SystemExit(
            f"this example needs torch ({missing}): pip install 'danaus[torch]'"
        ) from None
    with tempfile.TemporaryDirectory() as directory:
        checkpoint = os.path.join(directory, "model.pt")
        driver = this_host().spawn_procs().spawn("driver", Driver, checkpoint)
        attempts = driver.run.call_one(until, die_at).get()
        for failure in driver.failed_ranks.call_one().get():
            print("told of:", failure)
        return attempts


if __name__ == "__main__":
    for attempt in main(*map(int, sys.argv[1:])):
        print("attempt:", attempt)
# --8<-- [end:main]
