"""Futures seen from asyncio loops other than the one they settle on."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from danaus.core import awake
from danaus.core.blocking import ActorThread
from danaus.core.future import new_future

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def runtime_loop():
    """A loop on a thread of its own, as a runtime's is."""
    runner = ActorThread("test-runtime", awake.SLEEP)
    yield runner.loop
    runner.close()


def run(main: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
    """``asyncio.run`` on a plain loop, whatever transport the process selected last."""
    with asyncio.Runner(loop_factory=asyncio.SelectorEventLoop) as runner:
        return runner.run(main())


def on(loop: asyncio.AbstractEventLoop, fn, *args) -> None:
    done = threading.Event()

    def run() -> None:
        fn(*args)
        done.set()

    loop.call_soon_threadsafe(run)
    assert done.wait(10)


def test_an_asyncio_loop_awaits_a_future_that_settles_on_another(runtime_loop):
    afut, future = new_future(runtime_loop)

    async def main() -> str:
        waiting = future.as_asyncio()
        on(runtime_loop, afut.set_result, "answer")
        return await waiting

    assert run(main) == "answer"


def test_a_future_settling_after_its_asyncio_loop_closed_logs_nothing(runtime_loop, caplog):
    afut, future = new_future(runtime_loop)

    async def main() -> None:
        future.as_asyncio()

    run(main)
    with caplog.at_level(logging.DEBUG, logger="asyncio"):
        on(runtime_loop, afut.set_exception, RuntimeError("too late"))
        on(runtime_loop, lambda: None)  # the forwarding callback has run
    assert not [r for r in caplog.records if r.name == "asyncio"]
    with pytest.raises(RuntimeError, match="too late"):
        future.get(timeout=10)
