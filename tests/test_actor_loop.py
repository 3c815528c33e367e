"""The event loop of an actor's thread: woken by a lock while it watches no file."""

from __future__ import annotations

import asyncio
import socket
import threading

import pytest

from danaus.core.actor_loop import ActorLoop

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def loop():
    running = ActorLoop()
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
