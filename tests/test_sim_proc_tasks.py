"""The tasks of each simulated proc, kept so that a crash ends them all."""

from __future__ import annotations

import asyncio
import gc

from danaus.transports.sim.proc_tasks import ProcTasks


def test_a_task_is_kept_while_it_lives_and_dropped_once_it_is_gone():
    loop = asyncio.new_event_loop()
    try:
        tasks = ProcTasks()
        first = loop.create_task(asyncio.sleep(0))
        second = loop.create_task(asyncio.sleep(0))
        tasks.add_task(first)
        tasks.add_task(second)
        assert set(tasks.tasks()) == {first, second}
        loop.run_until_complete(asyncio.gather(first, second))
        del first
        gc.collect()
        assert tasks.tasks() == [second]
        assert len(tasks) == 1
    finally:
        loop.close()
