"""The controller's directory judges heartbeats on a clock of the time it was awake to hear them."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from danaus.transports.tcp import control, directory
from danaus.transports.tcp.directory import Directory
from tests.timers import Timers

INTERVAL = 0.1
TIMEOUT = 0.5


@pytest.fixture
def timers(monkeypatch: pytest.MonkeyPatch) -> Timers:
    """The directory's I/O loop, and its ``time.monotonic``, driven by the test."""
    found = Timers()
    monkeypatch.setattr(directory, "time", SimpleNamespace(monotonic=lambda: found.now))
    return found


def test_a_controller_thread_that_could_not_run_blames_none_of_its_procs(timers):
    """For seconds the controller's thread ran nothing (its code held the interpreter): no
    ping went out, no answer was read. Its idle proc is not lost for that, nor asked about;
    silence that follows, while the thread runs, is counted."""
    asked: list[str] = []
    killed: list[str] = []
    found = Directory(
        lambda dst, message: None,
        timers,  # type: ignore[arg-type]
        heartbeat_interval=INTERVAL,
        heartbeat_timeout=TIMEOUT,
        kill=lambda proc, sig: killed.append(proc),
        process_state=lambda proc: asked.append(proc) or "halted",
    )
    found.handle("p", control.Hello(control.Address("tcp://a", "tcp://b"), 4321, "vm"))

    timers.advance(5.0)
    assert found.live("p") and asked == [] and killed == []

    for _ in range(int(TIMEOUT / INTERVAL) + 2):
        timers.advance(INTERVAL)
    assert asked == ["p"] and killed == ["p"] and not found.live("p")
