"""The event loop of an actor's thread: woken by a lock while it watches no file."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Callable

import pytest

from danaus.core import awake
from danaus.core.actor_loop import ActorLoop
from danaus.core.blocking import ActorThread

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def loop():
    running = ActorLoop(awake.SLEEP)
    thread = threading.Thread(target=running.run_forever, daemon=True)
    thread.start()
    yield running
    running.call_soon_threadsafe(running.stop)
    thread.join(10)
    running.close()


def test_work_from_another_thread_runs_on_the_loop(loop):
    ran_on: list[int] = []
    done = threading.Event()

    def record() -> None:
        ran_on.append(threading.get_ident())
        if len(ran_on) == 100:
            done.set()

    for _ in range(100):
        loop.call_soon_threadsafe(record)
    assert done.wait(10)
    assert set(ran_on) == {loop._thread_id}


def test_timers_fire_while_the_loop_sleeps_on_its_lock(loop):
    async def nap() -> str:
        await asyncio.sleep(0.05)
        return "rested"

    assert asyncio.run_coroutine_threadsafe(nap(), loop).result(10) == "rested"


def test_a_loop_watching_a_socket_hears_both_the_socket_and_other_threads(loop):
    ours, theirs = socket.socketpair()
    heard: list[bytes] = []
    got = threading.Event()

    def readable() -> None:
        heard.append(ours.recv(64))
        got.set()

    loop.call_soon_threadsafe(loop.add_reader, ours.fileno(), readable)
    theirs.send(b"ping")
    assert got.wait(10) and heard == [b"ping"]
    assert asyncio.run_coroutine_threadsafe(asyncio.sleep(0, "still awake"), loop).result(10)
    loop.call_soon_threadsafe(loop.remove_reader, ours.fileno())
    assert asyncio.run_coroutine_threadsafe(asyncio.sleep(0.01, "lock again"), loop).result(10)
    ours.close()
    theirs.close()


def hand_over(loop: ActorLoop, work: Callable[[], None]) -> None:
    """What the runtime does with an actor's work: on the actor's loop, else (it ended) here."""
    try:
        loop.call_soon_threadsafe(work)
    except RuntimeError:
        work()


def from_another_thread(fn: Callable[[], None]) -> None:
    thread = threading.Thread(target=fn)
    thread.start()
    thread.join(10)


def test_work_handed_over_just_before_the_loop_closes_still_runs_once():
    runner = ActorThread("test-actor", awake.SLEEP)
    ran: list[int] = []
    close = runner.loop.close

    def close_after_a_late_hand_over() -> None:
        from_another_thread(lambda: hand_over(runner.loop, lambda: ran.append(1)))
        close()

    runner.loop.close = close_after_a_late_hand_over
    runner.close()
    runner._thread.join(10)
    assert ran == [1]


def test_work_handed_over_after_the_loop_stopped_runs_on_its_thread():
    runner = ActorThread("test-actor", awake.SLEEP)
    ran_on: list[int] = []
    shut = runner.loop.shut

    def shut_after_a_late_hand_over() -> None:
        from_another_thread(
            lambda: hand_over(runner.loop, lambda: ran_on.append(threading.get_ident()))
        )
        shut()

    runner.loop.shut = shut_after_a_late_hand_over
    runner.close()
    runner._thread.join(10)
    assert ran_on == [runner._thread.ident]
