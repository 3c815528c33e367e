"""Tasks held weakly by the simulator: those of each proc, and of the whole cluster."""

from __future__ import annotations

import asyncio
import gc

from danaus.transports.sim.task_refs import TaskRefs


def test_a_task_is_kept_while_it_lives_and_dropped_once_it_is_gone():
    loop = asyncio.new_event_loop()
    try:
        tasks = TaskRefs()
        first = loop.create_task(asyncio.sleep(0))
        second = loop.create_task(asyncio.sleep(0))
        tasks.add_task(first)
        tasks.add_task(second)
        assert set(tasks.tasks()) == {first, second}
        assert tasks.holds(first) and tasks.holds(second)
        loop.run_until_complete(asyncio.gather(first, second))
        del first
        gc.collect()
        assert tasks.tasks() == [second]
        assert len(tasks) == 1
        other = loop.create_task(asyncio.sleep(0))
        assert not tasks.holds(other)
        loop.run_until_complete(other)
    finally:
        loop.close()
