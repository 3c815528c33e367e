"""The same plans and checkers on real processes: crashes and pauses as signals."""

from __future__ import annotations

from danaus.chaos import Fault, Plan, run_scenario
from danaus.core import trace as ev
from tests.chaos.scenarios import Calm, LeavesACallPending

PLAN = Plan(
    (
        Fault(at=0.3, kind="crash", target=(0, 1)),
        Fault(at=0.6, kind="pause", target=(0, 2), duration=2.5),
        Fault(at=0.8, kind="partition", target=(0,), duration=1.0),
    )
)
FAST_HEARTBEATS = {"heartbeat_interval": 0.1, "heartbeat_timeout": 1.0}


def test_crash_and_pause_apply_on_tcp_and_every_check_holds():
    outcome = run_scenario(Calm(), 0, PLAN, transport="tcp", **FAST_HEARTBEATS)
    assert outcome.violations == []
    applied = [e.fault for e in outcome.checked if isinstance(e, ev.FaultApplied)]
    assert [a.split()[1] for a in applied] == ["crash", "pause"]
    [skipped] = outcome.skipped
    assert skipped == f"{PLAN.faults[2].describe()}: the partition has no other side"
    assert any(isinstance(e, ev.Failure) for e in outcome.checked)
    assert any(isinstance(e, ev.Received) and e.proc != "root" for e in outcome.checked)
    pings = [op for op in outcome.history.operations() if op["op"] == "ping"]
    assert pings and pings[-1]["status"] == "ok"


def test_checkers_object_on_tcp_too():
    outcome = run_scenario(LeavesACallPending(), 0, Plan(), transport="tcp", **FAST_HEARTBEATS)
    assert "liveness" in {v.checker for v in outcome.violations}
