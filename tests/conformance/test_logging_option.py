"""ProcMesh.logging_option: checked on every transport; the level applies to procs of their own."""

from __future__ import annotations

import asyncio
import logging

import pytest

from danaus import Actor, endpoint, this_host


class LevelProbe(Actor):
    @endpoint
    def level(self) -> int:
        return logging.getLogger().getEffectiveLevel()


def test_logging_option_sets_the_level_of_the_procs(run, transport):
    async def main():
        procs = this_host().spawn_procs({"gpus": 2})
        await procs.logging_option(stream_to_client=True, aggregate_window_sec=2, level=40)
        probes = procs.spawn("probe", LevelProbe)
        levels = list((await probes.level.call()).values())
        await procs.slice(gpus=1).logging_option(level=logging.DEBUG)
        return levels, await probes.slice(gpus=1).level.call_one(), logging.getLogger().level

    levels, second, controller_level = run(main)
    if transport.real:
        assert levels == [40, 40] and second == logging.DEBUG
    else:  # simulated procs share the controller's process: its logger is left alone
        assert levels == [controller_level] * 2 and second == controller_level


def test_logging_option_checks_its_arguments(run):
    def main():
        procs = this_host().spawn_procs()
        with pytest.raises(ValueError, match="needs stream_to_client"):
            procs.logging_option(aggregate_window_sec=3)
        with pytest.raises(ValueError, match="invalid logging level"):
            procs.logging_option(level=1000)
        return procs.logging_option(stream_to_client=False).get()

    assert run(main) is None


def test_logging_option_runs_as_a_coroutine_and_as_a_future(run):
    """Monarch declares it ``async def``: ``asyncio.run`` and ``create_task`` take what it
    returns; ``get()``, ``await``, and not waiting at all work as for any future."""

    def main():
        procs = this_host().spawn_procs({"gpus": 2})
        ran = asyncio.run(procs.logging_option(stream_to_client=True))

        async def in_a_task():
            return await asyncio.create_task(procs.logging_option(level=logging.INFO))

        tasked = asyncio.run(in_a_task())
        procs.logging_option(level=logging.WARNING)  # applies, though nobody waits
        return ran, tasked, procs.logging_option(level=logging.INFO).get(timeout=30)

    assert run(main) == (None, None, None)
