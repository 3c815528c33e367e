"""Waits outside Danaus on sim: virtual time, on the world's thread only, undone at the end."""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from typing import Any

import pytest

import danaus.sim
from danaus import Actor, endpoint, this_host
from danaus.core import config
from danaus.transports.sim import outside_waits

STANDARD = (
    threading.Condition.wait,
    threading.Condition.wait_for,
    queue.Queue.get,
    queue.Queue.put,
    time.sleep,
)


def interposed() -> tuple[Any, ...]:
    return (
        threading.Condition.wait,
        threading.Condition.wait_for,
        queue.Queue.get,
        queue.Queue.put,
        time.sleep,
    )


def now() -> float:
    return config.current_world().loop.time()


def test_the_standard_functions_come_back_exactly_when_the_world_shuts_down():
    def main() -> tuple[bool, bool]:
        during = interposed()
        other: list[Any] = []
        thread = threading.Thread(target=lambda: other.append(outside_waits._world_here()))
        thread.start()
        thread.join()
        return all(a is not b for a, b in zip(during, STANDARD)), other == [None]

    assert danaus.sim.run(main).value == (True, True)
    assert interposed() == STANDARD


def test_waits_take_virtual_time_and_replay():
    def main() -> list[Any]:
        full: queue.Queue[int] = queue.Queue(maxsize=1)
        full.put(1)
        condition = threading.Condition()
        seen: list[Any] = []
        start = now()
        with condition:
            seen.append(condition.wait_for(lambda: False, timeout=7))
        seen.append(round(now() - start, 6))
        try:
            full.put(2, timeout=3)
        except queue.Full:
            seen.append("full")
        seen.append(round(now() - start, 6))
        time.sleep(0)
        seen.append(full.get(timeout=1))
        return seen

    first, second = danaus.sim.run(main), danaus.sim.run(main)
    assert first.value == [False, 7.0, "full", 10.0, 1]
    assert first.digest == second.digest


def test_a_wait_nothing_can_end_stalls_instead_of_hanging():
    def main() -> None:
        this_host().spawn_procs({"gpus": 1})
        threading.Event().wait()

    with pytest.raises(danaus.sim.SimulationStalled):
        danaus.sim.run(main)
    assert interposed() == STANDARD


class Clock(Actor):
    @endpoint
    async def blocks(self, seconds: float) -> float:
        time.sleep(seconds)  # blocks this actor's thread, on a real transport
        return asyncio.get_running_loop().time()

    @endpoint
    async def now(self) -> float:
        return asyncio.get_running_loop().time()


def test_blocking_in_async_code_holds_up_only_its_own_actor():
    async def main() -> tuple[float, float, float]:
        procs = this_host().spawn_procs({"gpus": 2})
        clocks = procs.spawn("clock", Clock)
        blocked, other = clocks.slice(gpus=0), clocks.slice(gpus=1)
        start = asyncio.get_running_loop().time()
        nap = blocked.blocks.call_one(10.0)
        queued = blocked.now.call_one()
        meanwhile = await other.now.call_one()
        return meanwhile - start, await queued - start, await nap - start

    meanwhile, queued, nap = danaus.sim.run(main).value
    assert meanwhile < 1.0
    assert nap >= 10.0 and queued >= nap


def test_the_controller_waits_while_an_actor_blocks_in_async_code():
    """The controller's wait ends during an actor's blocking wait; it returns once that does."""

    def main() -> tuple[float, float]:
        procs = this_host().spawn_procs({"gpus": 2})
        clocks = procs.spawn("clock", Clock)
        nap = clocks.slice(gpus=0).blocks.call_one(10.0)
        meanwhile = clocks.slice(gpus=1).now.call_one().get(timeout=60)
        return meanwhile, nap.get(timeout=60)

    meanwhile, nap = danaus.sim.run(main).value
    assert meanwhile < 1.0 <= 10.0 <= nap


def test_threads_started_before_the_world_leave_its_waits_virtual():
    release = threading.Event()
    bystander = threading.Thread(target=release.wait)
    bystander.start()
    try:

        def main() -> float:
            start = now()
            time.sleep(5)
            return now() - start

        assert danaus.sim.run(main).value == 5
    finally:
        release.set()
        bystander.join()
