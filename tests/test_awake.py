"""Waiting awake: a proc's waits poll a while before they sleep, and an idle proc sleeps."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator

import pytest

import danaus
from danaus import Actor, endpoint, this_host
from danaus.core import awake

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def spin(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """A process that polls for 50 ms; the list counts its yields between polls."""
    yields = [0]
    real_yield = os.sched_yield

    def counted_yield() -> None:
        yields[0] += 1
        real_yield()

    monkeypatch.setattr(awake.os, "sched_yield", counted_yield)
    # These tests are about polling itself: a yield slowed by whatever else runs on the machine
    # must not pause it.
    monkeypatch.setattr(awake, "CONTENDED", float("inf"))
    monkeypatch.setattr(awake, "_quiet_until", 0.0)
    awake.keep_awake(0.05)
    try:
        yield yields
    finally:
        awake.keep_awake(0)


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
    spin: list[int],
) -> None:
    lock = _Lock()
    assert awake.acquire(lock, 30)  # type: ignore[arg-type]
    assert (lock.polls, lock.blocking_waits) == (2, 0)
    assert spin[0] == 1


def test_a_wait_polls_then_sleeps_until_its_timeout(spin: list[int]) -> None:
    lock = threading.Lock()
    lock.acquire()
    start = time.monotonic()
    assert not awake.acquire(lock, 0.2)
    assert time.monotonic() - start >= 0.2
    assert spin[0] > 0


def test_a_wait_shorter_than_the_spin_only_polls(spin: list[int]) -> None:
    lock = threading.Lock()
    lock.acquire()
    assert not awake.acquire(lock, 0.01)
    assert spin[0] > 0


class _Clock:
    """``time`` for `awake`: its ``perf_counter`` moves only when a yield runs another thread."""

    def __init__(self) -> None:
        self.now = 1000.0

    def perf_counter(self) -> float:
        return self.now


class _NeverFree:
    """A lock no poll takes; a blocking wait gets it at once (it stands for the sleep)."""

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        return blocking


def test_polling_pauses_while_the_cpu_is_wanted_elsewhere(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = _Clock()
    yields: list[float] = []

    def busy_yield() -> None:
        """Each yield runs another thread for a millisecond: the CPU has no time to spare."""
        yields.append(clock.now)
        clock.now += 0.001

    monkeypatch.setattr(awake, "time", clock)
    monkeypatch.setattr(awake.os, "sched_yield", busy_yield)
    monkeypatch.setattr(awake, "_quiet_until", 0.0)
    monkeypatch.setattr(awake, "_backoff", awake.BACKOFF)
    awake.keep_awake(0.05)
    try:
        lock = _NeverFree()
        assert awake.acquire(lock, 30)  # type: ignore[arg-type]
        assert len(yields) == 1  # the first late yield ends the poll
        clock.now += awake.BACKOFF / 2
        assert awake.acquire(lock, 30)  # type: ignore[arg-type]
        assert len(yields) == 1  # paused: the wait sleeps at once
        clock.now += awake.BACKOFF
        assert awake.acquire(lock, 30)  # type: ignore[arg-type]
        assert len(yields) == 2  # polls again, finds the CPU wanted again
        clock.now += 1.5 * awake.BACKOFF
        assert awake.acquire(lock, 30)  # type: ignore[arg-type]
        assert len(yields) == 2  # the pause has doubled
        clock.now += awake.BACKOFF
        assert awake.acquire(lock, 30)  # type: ignore[arg-type]
        assert len(yields) == 3
    finally:
        awake.keep_awake(0)


def test_polling_resumes_at_full_length_once_yields_come_back_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = _Clock()
    yields: list[float] = []
    busy = [True]

    def yield_() -> None:
        yields.append(clock.now)
        clock.now += 0.001 if busy[0] else 1e-6

    monkeypatch.setattr(awake, "time", clock)
    monkeypatch.setattr(awake.os, "sched_yield", yield_)
    monkeypatch.setattr(awake, "_quiet_until", 0.0)
    monkeypatch.setattr(awake, "_backoff", awake.BACKOFF)
    awake.keep_awake(0.001)
    try:
        lock = _NeverFree()
        awake.acquire(lock, 30)  # type: ignore[arg-type]
        clock.now += 10 * awake.BACKOFF
        busy[0] = False
        awake.acquire(lock, 30)  # type: ignore[arg-type]
        assert len(yields) > 100  # a whole spin of quick yields
        assert awake._backoff == awake.BACKOFF
    finally:
        awake.keep_awake(0)


def test_without_a_spin_a_wait_never_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(awake.os, "sched_yield", lambda: pytest.fail("polled"))
    awake.keep_awake(0)
    lock = threading.Lock()
    lock.acquire()
    assert not awake.acquire(lock, 0.01)
    lock.release()
    assert awake.acquire(lock)


def test_a_spin_cannot_be_negative() -> None:
    with pytest.raises(ValueError, match="cannot be negative"):
        awake.keep_awake(-1)


def test_a_selector_polls_only_after_a_pass_that_found_something(spin: list[int]) -> None:
    reader, writer = os.pipe()
    selector = awake.AwakeSelector()
    try:
        selector.register(reader, awake.selectors.EVENT_READ)
        # Idle: a timer's wake-up finds nothing, and the next wait does not poll.
        assert selector.select(0.01) == []
        assert selector.select(0.01) == []
        assert spin[0] == 0
        os.write(writer, b"x")
        assert len(selector.select(1)) == 1
        os.read(reader, 1)
        # Busy: the wait after a pass that found a message polls first.
        assert selector.select(0.01) == []
        assert spin[0] > 0
        # That wait found nothing: the next one sleeps at once.
        polled = spin[0]
        assert selector.select(0.01) == []
        assert spin[0] == polled
    finally:
        selector.close()
        os.close(reader)
        os.close(writer)


def test_a_selector_polling_returns_what_becomes_ready(spin: list[int]) -> None:
    reader, writer = os.pipe()
    selector = awake.AwakeSelector()
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
        return awake.spin()


@pytest.mark.parametrize("option", [None, 0, 750])
def test_every_proc_polls_for_the_jobs_spin(option: int | None) -> None:
    options = {} if option is None else {"wait_spin_us": option}
    danaus.configure(transport="tcp", **options)
    try:
        procs = this_host().spawn_procs(per_host={"gpus": 3})
        spins = procs.spawn("spin", Spin).spin.call().get(timeout=60)
        controller_spin = awake.spin()
    finally:
        danaus.shutdown()
    expected = (awake.WAIT_SPIN_US if option is None else option) / 1e6
    assert set(spins.values()) == {expected}
    assert controller_spin == expected
    # The controller's runtime has ended: its process waits asleep again.
    assert awake.spin() == 0


@pytest.mark.parametrize(
    ("value", "error", "match"),
    [
        ("200", TypeError, "whole number of µs"),
        (True, TypeError, "whole number of µs"),
        (2.5, TypeError, "whole number of µs"),
        (-1, ValueError, "within 0..100000"),
        (awake.MAX_WAIT_SPIN_US + 1, ValueError, "within 0..100000"),
    ],
)
def test_a_bad_spin_is_refused_at_configure(value: object, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        danaus.configure(transport="tcp", wait_spin_us=value)
