"""Heartbeats are answered where user code cannot block them."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import psutil

from danaus import Actor, endpoint, this_host
from tests.tcp.conftest import ROOT, wait_until


def hold_interpreter(at_least: float) -> float:
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
        return hold_interpreter(at_least)

    @endpoint
    def pid(self) -> int:
        return os.getpid()

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


def test_procs_outlive_a_controller_whose_own_code_holds_the_interpreter(tcp):
    """The controller's heartbeats wait for its interpreter's lock while its main thread is
    in a long call into C (as in a large import): its procs on its host see it run, and wait."""
    tcp(heartbeat_interval=0.1, heartbeat_timeout=0.5)
    holders = this_host().spawn_procs({"h": 2}).spawn("holder", Holder)
    assert set(holders.ok.call().get(timeout=60).values()) == {"ok"}
    for _ in range(3):
        assert hold_interpreter(1.5) >= 1.5
    assert set(holders.ok.call().get(timeout=10).values()) == {"ok"}


FROZEN_CONTROLLER = """
import danaus
from tests.tcp.test_control_plane import Holder
danaus.configure(transport="tcp", heartbeat_interval=0.1, heartbeat_timeout=0.5)
holders = danaus.this_host().spawn_procs({"h": 2}).spawn("holder", Holder)
print(*holders.pid.call().get(timeout=60).values(), flush=True)
input()
"""


def test_procs_of_a_paused_controller_end_after_the_heartbeat_timeout():
    """A controller that does not run (here stopped by SIGSTOP) sends no heartbeat, and its
    procs do not wait for it."""
    controller = subprocess.Popen(
        [sys.executable, "-c", FROZEN_CONTROLLER],
        cwd=ROOT,
        env={**os.environ, "DANAUS_TRANSPORT": "tcp"},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert controller.stdout is not None
        procs = [psutil.Process(int(pid)) for pid in controller.stdout.readline().split()]
        assert len(procs) == 2
        controller.send_signal(signal.SIGSTOP)
        wait_until(
            lambda: not any(p.is_running() and p.status() != "zombie" for p in procs),
            60,
            "the procs of the paused controller to end",
        )
    finally:
        controller.send_signal(signal.SIGCONT)
        controller.kill()
        controller.wait(timeout=60)
