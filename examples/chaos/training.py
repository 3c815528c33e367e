"""Data-parallel training with a parameter server, under faults.

The server holds the model (a few floats) and its version, the number of steps
committed. Each step the controller asks every worker to train; a worker pulls
the parameters, computes its gradient for the step (a fixed function of step
and rank) and pushes it, again if the answer is slow. The server buffers one
gradient per (step, worker), for the current step only, so late and repeated
pushes change nothing, and commits the step (adds the buffered gradients to
the parameters) when every worker has pushed or the controller stops waiting.
Workers run on h1 and h2 and are restarted when they fail; the server lives in
the controller's own process, which no fault touches.

Invariants: the version never goes backwards, for the controller or for any
one worker; no (step, worker) gradient is applied twice; every committed step
applied at least one; the final parameters, and those of every pull, are the
sum of the gradients applied before; steps commit after every fault has healed.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from itertools import pairwise
from typing import Any

from danaus import (
    Actor,
    ActorError,
    ActorMesh,
    RestartPolicy,
    SupervisionError,
    context,
    endpoint,
    hosts,
    this_proc,
)
from danaus.chaos import History, Scenario

DIM = 4
COMPUTE = 0.4  # simulated seconds to compute a gradient


def gradient(step: int, worker: int) -> list[float]:
    """Worker ``worker``'s gradient at ``step``: multiples of 1/8, so every sum is exact."""
    return [((step * 7 + worker * 3 + i * 5) % 9 - 4) / 8 for i in range(DIM)]


class ParameterServer(Actor):
    def __init__(self, workers: int) -> None:
        self.workers = workers
        self.params = [0.0] * DIM
        self.version = 0
        self.buffered: dict[tuple[int, int], list[float]] = {}
        self.applied: list[tuple[int, int]] = []

    @endpoint
    def pull(self) -> tuple[int, list[float]]:
        return self.version, list(self.params)

    @endpoint
    def push(self, step: int, worker: int, grad: list[float]) -> bool:
        """Buffer a gradient for the current step; a stale step or a repeat is ignored."""
        if step != self.version or (step, worker) in self.buffered:
            return False
        self.buffered[(step, worker)] = grad
        if len(self.buffered) == self.workers:
            self._commit()
        return True

    @endpoint
    def close_step(self, step: int) -> int:
        """The controller stopped waiting: commit ``step`` with the gradients that came."""
        if step == self.version and self.buffered:
            self._commit()
        return self.version

    @endpoint
    def state(self) -> dict[str, Any]:
        return {"version": self.version, "params": self.params, "applied": self.applied}

    def _commit(self) -> None:
        for key, grad in sorted(self.buffered.items()):
            self.params = [p + g for p, g in zip(self.params, grad)]
            self.applied.append(key)
        self.buffered = {}
        self.version += 1


class Worker(Actor):
    def __init__(self, ps: ActorMesh[ParameterServer]) -> None:
        self.ps = ps
        self.rank = context().actor_instance.rank.rank

    @endpoint
    async def train(self, step: int) -> tuple[int, list[float]] | None:
        """Train ``step`` if it is still the server's current one; the version and params pulled."""
        try:
            version, params = await asyncio.wait_for(self.ps.pull.call_one(), 1.0)
        except (ActorError, asyncio.TimeoutError):
            return None
        if version == step:
            await asyncio.sleep(COMPUTE)
            grad = gradient(step, self.rank)
            for _ in range(3):
                try:
                    await asyncio.wait_for(self.ps.push.call_one(step, self.rank, grad), 0.5)
                    break
                except (ActorError, asyncio.TimeoutError):
                    continue
        return version, params


class Training(Scenario):
    """Steps commit under faults; every gradient is applied at most once, and all add up."""

    hosts = 3
    duration = 5.0
    settle = 3.0
    endpoints = (("ps", "pull"), ("ps", "push"), ("workers", "train"))
    step_timeout = 1.0

    async def run(self, history: History) -> int:
        loop = asyncio.get_running_loop()
        procs = hosts().slice(hosts=slice(1, 3)).spawn_procs(per_host={"gpus": 2}, name="workers")
        ps = this_proc().spawn("ps", ParameterServer, len(procs))
        policy = RestartPolicy(max_restarts=100, backoff=0.05, max_backoff=0.5)
        workers = procs.spawn("workers", Worker, ps, restart=policy)
        ranks = [workers.slice(hosts=h, gpus=g) for h in range(2) for g in range(2)]

        async def train(worker: ActorMesh[Worker], step: int) -> tuple[int, list[float]] | None:
            try:
                return await asyncio.wait_for(worker.train.call_one(step), self.step_timeout)
            except (SupervisionError, ActorError, asyncio.TimeoutError):
                return None

        version = 0
        while loop.time() < self.quiet_after + 2:
            op = history.invoke("step", step=version)
            pulls = await asyncio.gather(*(train(worker, version) for worker in ranks))
            for rank, pulled in enumerate(pulls):
                if pulled is not None:
                    history.record("pull", worker=rank, version=pulled[0], params=pulled[1])
            committed = await ps.close_step.call_one(version)
            history.record("version", version=committed)
            if committed > version:
                history.ok(op, version=committed)
            else:
                history.fail(op, "no gradient arrived")
                await asyncio.sleep(self.step_timeout / 2)
            version = committed
        state = await ps.state.call_one()
        history.record("final", **state)
        return state["version"]

    def check(self, history: History) -> list[str]:
        final = next(history.of("final"), None)
        if final is None:
            return ["the parameter server was never read back"]
        versions = [e["version"] for e in history.of("version")] + [final["version"]]
        problems = [
            f"the version went from {a} back to {b}" for a, b in pairwise(versions) if b < a
        ]
        applied = [(step, worker) for step, worker in final["applied"]]
        for key, count in sorted(Counter(applied).items()):
            if count > 1:
                problems.append(f"gradient (step, worker) {key} applied {count} times")
        steps = sorted({step for step, _ in applied})
        if steps != list(range(final["version"])):
            return [*problems, f"version {final['version']} but steps {steps} applied"]
        at = [[0.0] * DIM]  # at[v]: the parameters at version v
        for step, worker in applied:
            if step + 1 == len(at):
                at.append(at[-1])
            at[-1] = [p + g for p, g in zip(at[-1], gradient(step, worker))]
        if final["params"] != at[-1]:
            problems.append(f"params {final['params']} are not the applied gradients' sum {at[-1]}")
        latest: dict[int, int] = {}
        for pull in history.of("pull"):
            worker, version, params = pull["worker"], pull["version"], pull["params"]
            if version < latest.get(worker, 0):
                problems.append(f"worker {worker} pulled version {version} after {latest[worker]}")
            latest[worker] = version
            if params != at[version]:
                problems.append(f"worker {worker} pulled {params} at version {version}")
        ops = history.operations()
        if not any(op["status"] == "ok" and op["t"] >= self.quiet_after for op in ops):
            problems.append(f"no step committed after the faults healed (t >= {self.quiet_after})")
        return problems
