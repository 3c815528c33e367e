"""A program the dashboard's tests run on the simulator."""

from __future__ import annotations

import random

import pytest

import danaus
from danaus import Actor, endpoint, this_host
from danaus.core.config import current_world


class Step(Actor):
    @endpoint
    def step(self, n: int) -> int:
        print(f"step {n}")
        return n


def simulated() -> list[int]:
    """Three procs take five steps; then the second or the third crashes (the seed picks which:
    the simulator seeds `random`), and the first goes on."""
    danaus.unhandled_fault_hook = lambda failure: None
    procs = this_host().spawn_procs(per_host={"gpus": 3})
    steps = procs.spawn("step", Step)
    done = [sum(steps.step.call(n).get().values()) for n in range(5)]
    current_world().crash(random.choice(["root:1.1", "root:1.2"]), "crashed (a simulated fault)")
    with pytest.raises(danaus.SupervisionError):
        steps.step.call(5).get()  # fails once the controller has learned of the crash
    done += [steps.slice(gpus=0).step.call_one(n).get() for n in range(6, 10)]
    return done
