"""Heartbeats are answered where user code cannot block them."""

from __future__ import annotations

import re
import time

from danaus import Actor, endpoint, this_host


class Busy(Actor):
    @endpoint
    def spin(self, seconds: float) -> int:
        deadline = time.monotonic() + seconds
        rounds = 0
        while time.monotonic() < deadline:
            rounds += 1
        return rounds

    @endpoint
    def ok(self) -> str:
        return "ok"


def test_a_cpu_bound_endpoint_six_heartbeat_timeouts_long_is_not_declared_dead(tcp):
    tcp(heartbeat_interval=0.1, heartbeat_timeout=0.5)
    busy = this_host().spawn_procs().spawn("busy", Busy)
    assert busy.spin.call_one(3.0).get(timeout=60) > 0
    assert busy.ok.call_one().get(timeout=10) == "ok"


class Holder(Actor):
    @endpoint
    def hold_interpreter(self, at_least: float) -> float:
        """Compute in one call into C that keeps the interpreter's lock (a regular expression
        that backtracks), longer than ``at_least`` seconds; how long the longest such call took.

        The pattern's cost doubles with each character, so the calls grow until one is long
        enough, whatever the machine's speed.
        """
        longest = 0.0
        length = 16
        while longest < at_least:
            start = time.monotonic()
            re.fullmatch(r"(a|a)+b", "a" * length)
            longest = max(longest, time.monotonic() - start)
            length += 1
        return longest

    @endpoint
    def ok(self) -> str:
        return "ok"


def test_a_proc_whose_code_holds_the_interpreter_past_the_heartbeat_timeout_lives(tcp):
    """No heartbeat is answered while a call into C holds the interpreter's lock, but the
    process runs: it is busy, not lost, and the heartbeats it could not read meanwhile are
    no silence of the controller's. Each hold is a new chance for a heartbeat to arrive while
    the proc's I/O thread waits for the lock, hence several, on several procs."""
    tcp(heartbeat_interval=0.1, heartbeat_timeout=0.5)
    holders = this_host().spawn_procs({"h": 2}).spawn("holder", Holder)
    for _ in range(3):
        held = holders.hold_interpreter.call(1.5).get(timeout=120)
        assert min(held.values()) >= 1.5
    assert set(holders.ok.call().get(timeout=10).values()) == {"ok"}

