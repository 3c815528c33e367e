"""Waiting awake: a proc's waits poll a while before they sleep, and an idle proc sleeps.

How long is each world's (the job's ``wait_spin_us``): nothing of it lives in the process."""

from __future__ import annotations

import os
import threading
import time

import pytest

import danaus
from danaus import Actor, endpoint, this_host
from danaus.core import awake, config
from danaus.core.settings import MAX_WAIT_SPIN_US, JobOptions

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def yields(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the yields between polls."""
    counted = [0]
    real_yield = os.sched_yield

    def counted_yield() -> None:
        counted[0] += 1
        real_yield()

    monkeypatch.setattr(awake.os, "sched_yield", counted_yield)
    # These tests are about polling itself: a yield slowed by whatever else runs on the machine
    # must not pause it.
    monkeypatch.setattr(awake, "CONTENDED", float("inf"))
    return counted


@pytest.fixture
def waits() -> awake.Waits:
    """A proc's waits that poll for 50 ms."""
    return awake.Waits(50_000)


class _Lock:
    """A lock that another thread releases during the waiter's second poll."""

    def __init__(self) -> None:
        self.polls = 0
        self.blocking_waits = 0

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if blocking:
            self.blocking_waits += 1
            return True
        self.polls += 1
        return self.polls == 2


def test_a_lock_released_while_the_waiter_polls_is_taken_without_sleeping(
    waits: awake.Waits, yields: list[int]
) -> None:
    lock = _Lock()
    assert waits.acquire(lock, 30)  # type: ignore[arg-type]
    assert (lock.polls, lock.blocking_waits) == (2, 0)
    assert yields[0] == 1


def test_a_wait_polls_then_sleeps_until_its_timeout(waits: awake.Waits, yields: list[int]) -> None:
    lock = threading.Lock()
    lock.acquire()
    start = time.monotonic()
    assert not waits.acquire(lock, 0.2)
    assert time.monotonic() - start >= 0.2
    assert yields[0] > 0


def test_a_wait_shorter_than_the_spin_only_polls(waits: awake.Waits, yields: list[int]) -> None:
    lock = threading.Lock()
    lock.acquire()
    assert not waits.acquire(lock, 0.01)
    assert yields[0] > 0


class _Clock:
    """``time`` and ``os.sched_yield`` for `awake`: its ``perf_counter`` moves only when a
    yield runs another thread, for ``takes`` seconds; each yield is kept in ``yields``."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.takes = SLICE
        self.yields: list[float] = []

    def perf_counter(self) -> float:
        return self.now

    def sched_yield(self) -> None:
        self.yields.append(self.now)
        self.now += self.takes


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> _Clock:
    """Every yield of `awake` runs another thread for a time slice, unless the test says."""
    found = _Clock()
    monkeypatch.setattr(awake, "time", found)
    monkeypatch.setattr(awake.os, "sched_yield", found.sched_yield)
    return found


class _NeverFree:
    """A lock no poll takes; a blocking wait gets it at once (it stands for the sleep)."""

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        return blocking


SLICE = 0.004
"""What a yield takes when another thread computes on its CPU: a scheduler's time slice."""


def test_a_yield_that_hands_the_cpu_over_briefly_does_not_pause_polling(clock: _Clock) -> None:
    """A yield that lets a thread of the job run for a moment (the one that reads the awaited
    message, say) is the hand-off polling is for, not a sign of a host short of CPU."""
    clock.takes = 100e-6
    yields = clock.yields
    waits = awake.Waits(1000)
    waits.acquire(_NeverFree(), 30)  # type: ignore[arg-type]
    assert len(yields) >= 10  # the whole spin (1 ms), one yield per 100 us
    polled = len(yields)
    waits.acquire(_NeverFree(), 30)  # type: ignore[arg-type]
    assert len(yields) == 2 * polled  # and the next wait polls as long


def test_polling_pauses_while_the_cpu_is_wanted_elsewhere(clock: _Clock) -> None:
    yields = clock.yields
    waits = awake.Waits(50_000)
    lock = _NeverFree()
    assert waits.acquire(lock, 30)  # type: ignore[arg-type]
    assert len(yields) == 1  # the first late yield ends the poll
    clock.now += awake.BACKOFF / 2
    assert waits.acquire(lock, 30)  # type: ignore[arg-type]
    assert len(yields) == 1  # paused: the wait sleeps at once
    clock.now += awake.BACKOFF
    assert waits.acquire(lock, 30)  # type: ignore[arg-type]
    assert len(yields) == 2  # polls again, finds the CPU wanted again
    clock.now += 1.5 * awake.BACKOFF
    assert waits.acquire(lock, 30)  # type: ignore[arg-type]
    assert len(yields) == 2  # the pause has doubled
    clock.now += awake.BACKOFF
    assert waits.acquire(lock, 30)  # type: ignore[arg-type]
    assert len(yields) == 3


def test_polling_resumes_at_full_length_once_yields_come_back_at_once(clock: _Clock) -> None:
    waits = awake.Waits(1000)
    lock = _NeverFree()
    waits.acquire(lock, 30)  # type: ignore[arg-type]
    clock.now += 10 * awake.BACKOFF
    clock.takes = 1e-6
    waits.acquire(lock, 30)  # type: ignore[arg-type]
    assert len(clock.yields) > 100  # a whole spin of quick yields
    assert waits._backoff == awake.BACKOFF


def test_a_pause_is_the_waits_own(clock: _Clock) -> None:
    """Polling that paused in one world's waits goes on in another's: they share nothing."""
    yields = clock.yields
    paused, other = awake.Waits(50_000), awake.Waits(50_000)
    paused.acquire(_NeverFree(), 30)  # type: ignore[arg-type]
    paused.acquire(_NeverFree(), 30)  # type: ignore[arg-type]
    assert len(yields) == 1
    other.acquire(_NeverFree(), 30)  # type: ignore[arg-type]
    assert len(yields) == 2


@pytest.mark.parametrize("waits", [awake.Waits(0), awake.SLEEP])
def test_without_a_spin_a_wait_never_polls(
    monkeypatch: pytest.MonkeyPatch, waits: awake.Waits
) -> None:
    monkeypatch.setattr(awake.os, "sched_yield", lambda: pytest.fail("polled"))
    lock = threading.Lock()
    lock.acquire()
    assert not waits.acquire(lock, 0.01)
    lock.release()
    assert waits.acquire(lock)


def test_a_spin_cannot_be_negative() -> None:
    with pytest.raises(ValueError, match="cannot be negative"):
        awake.Waits(-1)


def test_threads_waiting_on_a_procs_loop_wait_as_the_proc_does() -> None:
    waits = awake.Waits(300)
    loop = awake.AwakeLoop(waits)
    try:
        assert awake.waits_of(loop) is waits
    finally:
        loop.close()
    other = awake.asyncio.new_event_loop()
    try:
        assert awake.waits_of(other) is awake.SLEEP
    finally:
        other.close()


def test_a_selector_polls_only_after_a_pass_that_found_something(
    waits: awake.Waits, yields: list[int]
) -> None:
    reader, writer = os.pipe()
    selector = awake.AwakeSelector(waits)
    try:
        selector.register(reader, awake.selectors.EVENT_READ)
        # Idle: a timer's wake-up finds nothing, and the next wait does not poll.
        assert selector.select(0.01) == []
        assert selector.select(0.01) == []
        assert yields[0] == 0
        os.write(writer, b"x")
        assert len(selector.select(1)) == 1
        os.read(reader, 1)
        # Busy: the wait after a pass that found a message polls first.
        assert selector.select(0.01) == []
        assert yields[0] > 0
        # That wait found nothing: the next one sleeps at once.
        polled = yields[0]
        assert selector.select(0.01) == []
        assert yields[0] == polled
    finally:
        selector.close()
        os.close(reader)
        os.close(writer)


def test_a_selector_polling_returns_what_becomes_ready(
    waits: awake.Waits, yields: list[int]
) -> None:
    reader, writer = os.pipe()
    selector = awake.AwakeSelector(waits)
    try:
        selector.register(reader, awake.selectors.EVENT_READ)
        os.write(writer, b"x")
        assert len(selector.select(1)) == 1
        os.read(reader, 1)
        threading.Timer(0.005, os.write, (writer, b"y")).start()
        ready = selector.select(None)
        assert [key.fd for key, _ in ready] == [reader]
    finally:
        selector.close()
        os.close(reader)
        os.close(writer)


class Spin(Actor):
    @endpoint
    def spin(self) -> float:
        """How long this proc's waits poll."""
        return config.current_world().waits.spin  # type: ignore[attr-defined,no-any-return]


@pytest.mark.parametrize("option", [None, 0, 750])
def test_every_proc_polls_for_the_jobs_spin(option: int | None) -> None:
    options = {} if option is None else {"wait_spin_us": option}
    danaus.configure(transport="tcp", **options)
    try:
        procs = this_host().spawn_procs(per_host={"gpus": 3})
        spins = procs.spawn("spin", Spin).spin.call().get(timeout=60)
        world = config.current_world()
        controller_spin = world.waits.spin  # type: ignore[attr-defined]
        runtime_loop = awake.waits_of(world.loop).spin
    finally:
        danaus.shutdown()
    expected = (JobOptions().wait_spin_us if option is None else option) / 1e6
    assert set(spins.values()) == {expected}
    assert controller_spin == runtime_loop == expected


@pytest.mark.parametrize(
    ("value", "error", "match"),
    [
        ("200", TypeError, "wait_spin_us must be an int"),
        (True, TypeError, "wait_spin_us must be an int"),
        (2.5, TypeError, "wait_spin_us must be an int"),
        (-1, ValueError, "from 0 to 100000"),
        (MAX_WAIT_SPIN_US + 1, ValueError, "from 0 to 100000"),
    ],
)
def test_a_bad_spin_is_refused_at_configure(value: object, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        danaus.configure(transport="tcp", wait_spin_us=value)
