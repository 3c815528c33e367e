"""A reinforcement-learning pipeline whose actors compute with torch: the program `compute_mix.py`
times, on Danaus or on Monarch.

Seven procs on a small machine: a pool of samplers, each running a policy network in a loop as
fast as it can and pushing every batch of sampled actions into one port; a scorer and a
reference model that each read a port, compute, and pass the batch on; a learner that takes one
batch per step, updates its policy and hands the new weights to one sampler of the pool. The
samplers keep the host's CPUs busy the whole time, so the figure is how fast the rest of the
pipeline gets its turn: the work of a program whose actors compute, not of messages alone.

    python benchmarks/_rl_pipeline.py [--framework danaus|monarch] [--steps 20]

Prints one JSON line: seconds from the start of the program to the actors being ready
(``ready_s``), to the first step (``first_step_s``) and the last (``last_step_s``), and to the
end of ``main`` with every mesh stopped (``done_s``), with the steps taken. The framework is
chosen by ``--framework`` (or ``RL_FRAMEWORK``) before the actors are defined, since their
classes derive from its ``Actor``.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import os
import sys
import time
from dataclasses import dataclass

import torch
from torch import nn

STARTED = time.monotonic()


def _framework() -> str:
    if "--framework" in sys.argv:
        return sys.argv[sys.argv.index("--framework") + 1]
    return os.environ.get("RL_FRAMEWORK", "danaus")


api = importlib.import_module({"danaus": "danaus", "monarch": "monarch.actor"}[_framework()])
Actor, Channel, endpoint, send, this_host = (
    api.Actor,
    api.Channel,
    api.endpoint,
    api.send,
    api.this_host,
)

OBSERVATION = 4
CHOICES = 4
WIDTH = 8
GROUP = 8
"""Actions sampled for each observation: the group whose rewards are compared."""
SAMPLERS = 4
CLIP = 0.2


def policy() -> nn.Module:
    return nn.Sequential(nn.Linear(OBSERVATION, WIDTH), nn.Tanh(), nn.Linear(WIDTH, CHOICES))


@dataclass
class Batch:
    """What travels down the pipeline; each stage fills in one more field."""

    observation: torch.Tensor
    actions: torch.Tensor
    logps: torch.Tensor
    rewards: torch.Tensor | None = None
    reference_logps: torch.Tensor | None = None


def distribution(logits: torch.Tensor) -> torch.distributions.Categorical:
    return torch.distributions.Categorical(logits=logits)


class Sampler(Actor):
    """Samples actions from its copy of the policy, as fast as it can, in a task of its own."""

    def __init__(self, out) -> None:
        self.model = policy()
        self.out = out
        self.weights: asyncio.Queue = asyncio.Queue()
        self.loop_task: asyncio.Task | None = None

    @endpoint
    async def start(self) -> None:
        self.loop_task = asyncio.create_task(self._sample_forever())

    async def _sample_forever(self) -> None:
        while True:
            while not self.weights.empty():
                self.model.load_state_dict(self.weights.get_nowait())
            observation = torch.randn(OBSERVATION)
            with torch.no_grad():
                chosen = distribution(self.model(observation))
                actions = chosen.sample((GROUP,))
                self.out.send(Batch(observation, actions, chosen.log_prob(actions)))
            await asyncio.sleep(0)  # let weights and the halt in between two batches

    @endpoint
    async def new_weights(self, state: dict) -> None:
        await self.weights.put(state)

    @endpoint
    async def halt(self) -> None:
        """Stop sampling, and tell the next stage the stream has ended."""
        await self._stop_loop()
        self.out.send(None)

    async def _stop_loop(self) -> None:
        if self.loop_task is not None and not self.loop_task.done():
            self.loop_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.loop_task

    async def __cleanup__(self, exc: Exception | None) -> None:
        await self._stop_loop()


class Stage(Actor):
    """A step of the pipeline: reads its port, computes, passes each batch on."""

    def __init__(self, state: dict | None = None) -> None:
        self.port, self.receiver = Channel.open()
        self.model = policy()
        if state is not None:
            self.model.load_state_dict(state)
        self.reward = nn.Sequential(
            nn.Linear(OBSERVATION + 1, WIDTH), nn.Tanh(), nn.Linear(WIDTH, 1)
        )

    @endpoint
    async def inbox(self):
        return self.port

    @endpoint
    async def run(self, out, scores: bool) -> None:
        while (batch := await self.receiver.recv()) is not None:
            with torch.no_grad():
                if scores:
                    pairs = torch.cat(
                        [batch.observation.expand(GROUP, -1), batch.actions.float()[:, None]], 1
                    )
                    batch.rewards = self.reward(pairs).squeeze(-1)
                else:
                    logits = self.model(batch.observation)
                    batch.reference_logps = distribution(logits).log_prob(batch.actions)
            out.send(batch)
        out.send(None)


class Learner(Actor):
    """Takes one batch per step, improves its policy, and hands the weights to one sampler."""

    def __init__(self, steps: int, done) -> None:
        self.model = policy()
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=0.05)
        self.port, self.receiver = Channel.open()
        self.steps = steps
        self.done = done

    @endpoint
    async def inbox(self):
        return self.port

    @endpoint
    async def weights(self) -> dict:
        return {name: value.clone() for name, value in self.model.state_dict().items()}

    @endpoint
    async def run(self, samplers) -> None:
        times = []
        for _ in range(self.steps):
            batch = await self.receiver.recv()
            advantage = (batch.rewards - batch.rewards.mean()) / (batch.rewards.std() + 1e-8)
            logps = distribution(self.model(batch.observation)).log_prob(batch.actions)
            ratio = (logps - batch.logps).exp()
            clipped = torch.clamp(ratio, 1 - CLIP, 1 + CLIP)
            loss = -torch.min(ratio * advantage, clipped * advantage).mean()
            loss = loss + 0.05 * (logps - batch.reference_logps).mean()
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
            times.append(time.time())
            state = {name: value.clone() for name, value in self.model.state_dict().items()}
            send(samplers.new_weights, args=(state,), kwargs={}, selection="choose")
        await samplers.halt.call()
        self.done.send(times)


async def main(steps: int) -> dict:
    started = time.time() - (time.monotonic() - STARTED)
    sampler_procs = this_host().spawn_procs(per_host={"gpus": SAMPLERS})
    scorer_procs = this_host().spawn_procs(per_host={"gpus": 1})
    reference_procs = this_host().spawn_procs(per_host={"gpus": 1})
    learner_procs = this_host().spawn_procs(per_host={"gpus": 1})
    done, finished = Channel.open(once=True)

    learner = learner_procs.spawn("learner", Learner, steps, done)
    scorer = scorer_procs.spawn("scorer", Stage)
    reference = reference_procs.spawn("reference", Stage, await learner.weights.call_one())
    samplers = sampler_procs.spawn("samplers", Sampler, await scorer.inbox.call_one())
    to_reference = await reference.inbox.call_one()
    to_learner = await learner.inbox.call_one()
    await samplers.start.call()
    ready = time.time()
    running = [
        scorer.run.call_one(to_reference, True),
        reference.run.call_one(to_learner, False),
        learner.run.call_one(samplers),
    ]
    step_times = await finished.recv()
    for future in running:
        await future
    for procs in (sampler_procs, scorer_procs, reference_procs, learner_procs):
        await procs.stop()
    return {
        "steps": len(step_times),
        "ready_s": round(ready - started, 3),
        "first_step_s": round(step_times[0] - started, 3),
        "last_step_s": round(step_times[-1] - started, 3),
        "done_s": round(time.time() - started, 3),
    }


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--framework", choices=["danaus", "monarch"], default=_framework())
    parser.add_argument("--steps", type=int, default=20)
    arguments = parser.parse_args()
    print(json.dumps(asyncio.run(main(arguments.steps))), flush=True)
