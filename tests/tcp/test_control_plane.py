"""Heartbeats are answered where user code cannot block them."""

from __future__ import annotations

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
