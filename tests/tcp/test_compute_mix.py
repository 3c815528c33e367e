"""Procs that compute, several per core, while they message: nobody starves, all of it ends.

A pipeline as a reinforcement-learning program has one: samplers that compute and push work
into a port without pause, a stage that reads the port and passes work on, and a learner that
takes one item per step and sends new weights back to one sampler. The host is oversubscribed
on purpose, part of the computing holds the interpreter's lock, and heartbeats are short, so
that a proc's turn at the lock, a heartbeat's and a hand-off's all compete.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import time

import pytest

import danaus
from danaus import Actor, Channel, endpoint, send, this_host
from tests.tcp.conftest import alive

pytestmark = pytest.mark.timeout(180)

SAMPLERS = 4
STEPS = 30
HANG_GUARD = 90.0
"""Seconds within which the whole pipeline must have run (it takes about one on a quiet host)."""


def compute(seed: int) -> float:
    """A few milliseconds of work, part of it in one call that keeps the interpreter's lock."""
    re.fullmatch(r"(a|a)+b", "a" * 12)
    return sum((seed * k) % 7 for k in range(2000)) / 2000


class Work:
    """An item of work that costs as much to unpickle as to make, as a batch of tensors of a
    class defined in the program does."""

    def __init__(self, version: int, seed: int) -> None:
        self.version = version
        self.seed = seed
        self.value = compute(seed)

    def __reduce__(self) -> tuple[object, ...]:
        return Work, (self.version, self.seed)


class Sampler(Actor):
    def __init__(self, out) -> None:
        self.out = out
        self.version = 0
        self.task: asyncio.Task | None = None

    @endpoint
    async def start(self) -> int:
        self.task = asyncio.create_task(self._sample_forever())
        return os.getpid()

    async def _sample_forever(self) -> None:
        n = 0
        while True:
            n += 1
            self.out.send(Work(self.version, n))
            await asyncio.sleep(0)

    @endpoint
    async def new_weights(self, version: int) -> None:
        self.version = version

    @endpoint
    async def weights_version(self) -> int:
        return self.version

    @endpoint
    async def halt(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
        self.out.send(None)


class Stage(Actor):
    def __init__(self) -> None:
        self.port, self.receiver = Channel.open()

    @endpoint
    async def inbox(self):
        return self.port

    @endpoint
    async def run(self, out) -> int:
        while (work := await self.receiver.recv()) is not None:
            compute(work.seed)
            out.send(work)
        out.send(None)
        return os.getpid()


class Learner(Actor):
    def __init__(self) -> None:
        self.port, self.receiver = Channel.open()

    @endpoint
    async def inbox(self):
        return self.port

    @endpoint
    async def run(self, samplers, steps: int) -> list[int]:
        versions = []
        for step in range(steps):
            work = await self.receiver.recv()
            compute(work.seed + step)
            versions.append(work.version)
            send(samplers.new_weights, args=(step + 1,), kwargs={}, selection="choose")
        await samplers.halt.call()
        return versions

    @endpoint
    def pid(self) -> int:
        return os.getpid()


@pytest.mark.parametrize("transport", ["tcp", "ucx"])
def test_a_pipeline_of_computing_procs_runs_to_the_end_with_every_proc_kept(transport):
    """A proc lost on the way fails a call or reaches the root unhandled (which fails the
    test); a proc left running after its mesh stopped is found by its pid."""
    danaus.configure(transport=transport, heartbeat_interval=0.1, heartbeat_timeout=0.5)
    try:
        sampler_procs = this_host().spawn_procs(per_host={"s": SAMPLERS})
        stage_procs = this_host().spawn_procs()
        learner_procs = this_host().spawn_procs()
        learner = learner_procs.spawn("learner", Learner)
        stage = stage_procs.spawn("stage", Stage)
        samplers = sampler_procs.spawn("samplers", Sampler, stage.inbox.call_one().get())
        pids = list(samplers.start.call().get(timeout=60).values())
        pids.append(learner.pid.call_one().get(timeout=60))

        started = time.monotonic()
        staged = stage.run.call_one(learner.inbox.call_one().get())
        versions = learner.run.call_one(samplers, STEPS).get(timeout=HANG_GUARD)
        pids.append(staged.get(timeout=HANG_GUARD))
        assert time.monotonic() - started < HANG_GUARD

        assert len(versions) == STEPS
        # Each step's weights reached one sampler while it computed, before its halt.
        assert max(samplers.weights_version.call().get(timeout=30).values()) == STEPS
        for procs in (sampler_procs, stage_procs, learner_procs):
            procs.stop().get(timeout=30)
        assert not [pid for pid in pids if alive(pid)]
    finally:
        danaus.shutdown()
