"""Programs written for real clusters run unchanged on every transport.

They wait on things outside Danaus (a ``threading.Event`` their fault hook
sets, a queue, a ``concurrent.futures`` future, ``time.sleep``), and keep
meshes across several ``asyncio.Runner.run`` calls, as test suites with
async fixtures do. On the simulator those waits take virtual time.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import queue
import threading
import time
from typing import Any

import pytest

import danaus
from danaus import Actor, endpoint, this_host
from danaus.core import config
from tests.conformance.transports import Transport


class Faulty(Actor):
    def __init__(self) -> None:
        raise RuntimeError("refuses to start")

    @endpoint
    def nothing(self) -> None:
        pass


class Napper(Actor):
    """Waits that end by timing out: in sync code, and blocking inside async code."""

    @endpoint
    def sync_waits(self, seconds: float) -> list[bool]:
        time.sleep(seconds)
        return [
            threading.Event().wait(seconds),
            _times_out(lambda: queue.Queue().get(timeout=seconds), queue.Empty),
        ]

    @endpoint
    async def blocking_waits(self, seconds: float) -> list[bool]:
        time.sleep(seconds)
        future: concurrent.futures.Future[None] = concurrent.futures.Future()
        done, _ = concurrent.futures.wait([future], timeout=seconds)
        return [bool(done), threading.Event().wait(seconds)]


def _times_out(wait: Any, error: type[Exception]) -> bool:
    try:
        wait()
    except error:
        return True
    return False


def _clock() -> float:
    """The world's clock: virtual seconds on the simulator, the loop's clock elsewhere."""
    return config.current_world().loop.time()


def _seconds(transport: Transport) -> float:
    """How long a wait that must time out waits: long on the simulator (it costs no real time)."""
    return 0.05 if transport.real else 15.0


def test_waits_outside_danaus_see_the_world_go_on(run, transport):
    seconds = _seconds(transport)

    def main() -> dict[str, Any]:
        fired = threading.Event()
        failures: queue.Queue[Any] = queue.Queue()
        first: concurrent.futures.Future[Any] = concurrent.futures.Future()

        def hook(failure: Any) -> None:
            failures.put(failure)
            if not first.done():
                first.set_result(failure)
            fired.set()

        danaus.unhandled_fault_hook = hook
        procs = this_host().spawn_procs({"gpus": 1})
        procs.spawn("faulty", Faulty)
        start = _clock()
        seen = {
            "event": fired.wait(timeout=15),
            "queue": "refuses to start" in str(failures.get(timeout=15)),
            "futures": len(concurrent.futures.wait([first], timeout=15).done) == 1,
        }
        time.sleep(seconds)
        seen["negative"] = [
            threading.Event().wait(seconds),
            _times_out(lambda: queue.Queue().get(timeout=seconds), queue.Empty),
            len(concurrent.futures.wait([concurrent.futures.Future()], timeout=seconds).done),
        ]
        seen["waited"] = _clock() - start
        napper = procs.spawn("napper", Napper)
        seen["in actors"] = [
            napper.sync_waits.call_one(seconds).get(timeout=60),
            napper.blocking_waits.call_one(seconds).get(timeout=60),
        ]
        return seen

    seen = run(main)
    assert {k: seen[k] for k in ("event", "queue", "futures")} == dict.fromkeys(
        ("event", "queue", "futures"), True
    )
    assert seen["negative"] == [False, True, 0]
    assert seen["in actors"] == [[False, True], [False, False]]
    assert seen["waited"] >= 4 * seconds


def test_asyncio_waits_see_the_world_go_on(run, transport):
    seconds = _seconds(transport)

    async def main() -> tuple[bool, bool, float]:
        loop = asyncio.get_running_loop()
        fired = asyncio.Event()
        danaus.unhandled_fault_hook = lambda failure: loop.call_soon_threadsafe(fired.set)
        this_host().spawn_procs({"gpus": 1}).spawn("faulty", Faulty)
        start = loop.time()
        await asyncio.wait_for(fired.wait(), timeout=15)
        await asyncio.sleep(seconds)
        try:
            await asyncio.wait_for(asyncio.Event().wait(), timeout=seconds)
        except asyncio.TimeoutError:
            timed_out = True
        else:
            timed_out = False
        return fired.is_set(), timed_out, loop.time() - start

    fired, timed_out, waited = run(main)
    assert fired and timed_out
    assert waited >= 2 * seconds


class Counter(Actor):
    def __init__(self) -> None:
        self.count = 0

    @endpoint
    async def bump(self) -> int:
        self.count += 1
        return self.count


async def _spawn() -> Any:
    procs = this_host().spawn_procs({"gpus": 2})
    return procs, procs.spawn("counter", Counter)


async def _bump(counter: Any) -> list[int]:
    return list((await counter.bump.call()).values())


async def _stop(procs: Any) -> None:
    await procs.stop()


@pytest.mark.skipif(not hasattr(asyncio, "Runner"), reason="asyncio.Runner is Python 3.11+")
def test_a_mesh_outlives_the_runner_call_that_spawned_it(transport, job, monkeypatch):
    """As with an async fixture: spawn in one ``Runner.run``, use in the next ones.

    The mesh outlives the runner too, as a module's fixture outlives each test's
    event loop, until it is stopped.
    """
    for key, value in transport.environment.items():
        monkeypatch.setenv(key, value)
    danaus.configure(transport=transport.name, **transport.options, **job["options"])
    try:
        with asyncio.Runner() as runner:
            procs, counter = runner.run(_spawn())
            assert runner.run(_bump(counter)) == [1, 1]
            assert runner.run(_bump(counter)) == [2, 2]
        assert asyncio.run(_bump(counter)) == [3, 3]
        asyncio.run(_stop(procs))
    finally:
        danaus.shutdown()


def _sees_a_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


class LoopWatcher(Actor):
    def __init__(self) -> None:
        self.in_init = _sees_a_loop()

    @endpoint
    def sync_code(self) -> tuple[bool, bool]:
        return self.in_init, _sees_a_loop()

    @endpoint
    async def async_code(self) -> bool:
        return _sees_a_loop()


def test_sync_code_sees_no_running_loop_and_async_code_does(run):
    def main() -> tuple[bool, tuple[bool, bool], bool]:
        watcher = this_host().spawn_procs({"gpus": 1}).spawn("watcher", LoopWatcher)
        return (
            _sees_a_loop(),
            watcher.sync_code.call_one().get(timeout=30),
            watcher.async_code.call_one().get(timeout=30),
        )

    assert run(main) == (False, (False, False), True)
