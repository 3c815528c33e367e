"""The controller's directory judges heartbeats on a clock of the time it was awake to hear them."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace

import pytest

from danaus.transports.tcp import control, directory
from danaus.transports.tcp.directory import Directory

INTERVAL = 0.1
TIMEOUT = 0.5


class Timers:
    """An I/O loop whose timers run when the test says their time has come."""

    def __init__(self) -> None:
        self.due: list[Callable[[], None]] = []

    def call_soon(self, fn: Callable[..., None], *args: object) -> None:
        fn(*args)

    def call_later(self, delay: float, fn: Callable[[], None]) -> None:
        self.due.append(fn)

    def run_due(self) -> None:
        due, self.due = self.due, []
        for fn in due:
            fn()


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The directory's ``time.monotonic``, set by the test."""
    now = [1000.0]
    monkeypatch.setattr(directory, "time", SimpleNamespace(monotonic=lambda: now[0]))
    return now


def test_a_controller_thread_that_could_not_run_blames_none_of_its_procs(clock):
    """For seconds the controller's thread ran nothing (its code held the interpreter): no
    ping went out, no answer was read. Its idle proc is not lost for that, nor asked about;
    silence that follows, while the thread runs, is counted."""
    asked: list[str] = []
    killed: list[str] = []
    timers = Timers()
    found = Directory(
        lambda dst, message: None,
        timers,  # type: ignore[arg-type]
        heartbeat_interval=INTERVAL,
        heartbeat_timeout=TIMEOUT,
        kill=lambda proc, sig: killed.append(proc),
        process_state=lambda proc: asked.append(proc) or "halted",
    )
    found.handle("p", control.Hello(control.Address("tcp://a", "tcp://b"), 4321, "vm"))

    clock[0] += 5.0
    timers.run_due()
    assert found.live("p") and asked == [] and killed == []

    for _ in range(int(TIMEOUT / INTERVAL) + 2):
        clock[0] += INTERVAL
        timers.run_due()
    assert asked == ["p"] and killed == ["p"] and not found.live("p")
