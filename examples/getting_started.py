"""Eight trainer actors on every host: train them, slice them, read their answers.

The program of docs/getting-started.md in one file, on every host of the job
(``hosts()``). Run it with ``python examples/getting_started.py`` (or ``make
demo``): on this host alone. It runs on any transport, e.g.
``DANAUS_TRANSPORT=sim python examples/getting_started.py``, and on a cluster
as it is, given the workers of the job (docs/clusters.md):
``DANAUS_WORKERS=10.0.0.2,10.0.0.3,10.0.0.4 DANAUS_BIND_HOST=10.0.0.1
DANAUS_JOB_KEY_FILE=job.key python examples/getting_started.py``.
"""

from danaus import Actor, context, endpoint, hosts


class Trainer(Actor):
    """Fits one number by gradient descent: the actor at rank r has target r."""

    def __init__(self, lr: float = 0.25) -> None:
        self.rank = context().actor_instance.rank.rank
        self.target = float(self.rank)
        self.weight = 0.0
        self.lr = lr
        self.steps = 0

    @endpoint
    def train(self, step: int) -> float:
        """One step; returns the loss measured before it."""
        loss = (self.weight - self.target) ** 2
        self.weight -= self.lr * 2 * (self.weight - self.target)
        self.steps += 1
        return loss

    @endpoint
    def steps_done(self) -> int:
        return self.steps


def show(values) -> str:
    return " ".join(f"{v:g}" for v in values)


def main() -> None:
    procs = hosts().spawn_procs(per_host={"gpus": 8})
    trainers = procs.spawn("trainers", Trainer)
    print(f"spawned {len(trainers)} trainers, mesh sizes {trainers.sizes}")

    for step in range(3):
        losses = trainers.train.call(step=step).get()
        print(f"step {step} losses: {show(losses.values())}")

    # View each host's 8 trainers as 2 nodes of 4 and train the second node once more.
    nodes = trainers.split(gpus=("node", "local"), local=4)
    losses = nodes.slice(node=1).train.call(step=3).get()
    print(f"node 1, step 3 losses: {show(losses.values())} (sizes {losses.sizes})")

    steps = trainers.steps_done.call().get()
    print(f"steps done per trainer: {show(steps.values())}")
    print(f"trainer gpus=5 of the first host did {steps.item(hosts=0, gpus=5)} steps")
    # The meshes this script spawned are stopped when it exits.


if __name__ == "__main__":
    main()
