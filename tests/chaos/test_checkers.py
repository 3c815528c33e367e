"""Every checker objects to a run built to break its rule, and passes a run that keeps it."""

from __future__ import annotations

import copy

import msgspec

from danaus.chaos import Plan, run_scenario
from danaus.chaos.checkers import delivery, reported_once
from danaus.chaos.runner import check_determinism
from danaus.core import trace as ev
from tests.chaos.scenarios import (
    BreaksItsInvariant,
    Calm,
    LeavesACallPending,
    LeavesAnActorStuck,
    ReadsTheWallClock,
)


def checkers(outcome):
    return sorted({v.checker for v in outcome.violations})


def test_a_calm_run_passes_every_checker():
    outcome = run_scenario(Calm(), 0, Plan())
    assert outcome.violations == []


def test_liveness_objects_to_a_call_left_pending():
    assert "liveness" in checkers(run_scenario(LeavesACallPending(), 0, Plan()))


def test_survivors_object_to_an_actor_that_never_answers():
    assert "survivors" in checkers(run_scenario(LeavesAnActorStuck(), 0, Plan()))


def test_user_invariants_are_checked():
    outcome = run_scenario(BreaksItsInvariant(), 0, Plan())
    assert [str(v) for v in outcome.violations] == ["[invariant] the invariant does not hold"]


def test_determinism_objects_to_a_run_that_reads_real_randomness():
    scenario = ReadsTheWallClock()
    problems = [check_determinism(scenario, 0, run_scenario(scenario, 0, Plan())) for _ in range(8)]
    assert any(p is not None and p.checker == "determinism" for p in problems)


def real_events():
    return copy.deepcopy(run_scenario(Calm(), 3, Plan()).checked)


def test_delivery_passes_a_real_trace_and_objects_to_each_broken_rule():
    events = real_events()
    assert delivery(events) == []
    recvs = [i for i, e in enumerate(events) if isinstance(e, ev.Received)]
    pairs: dict[tuple[type, str, str], list[int]] = {}
    for i in recvs:
        pairs.setdefault((type(events[i]), events[i].src, events[i].proc), []).append(i)
    first, second = next(found for found in pairs.values() if len(found) >= 2)[:2]
    duplicated = [*events[: first + 1], copy.copy(events[first]), *events[first + 1 :]]
    assert any("twice" in v.message for v in delivery(duplicated))
    dropped = [e for i, e in enumerate(events) if i != first]
    assert any("never delivered" in v.message for v in delivery(dropped))
    phantom = [*events, msgspec.structs.replace(events[first], seq=10_000)]
    assert any("never sent" in v.message for v in delivery(phantom))
    swapped = list(events)
    swapped[first], swapped[second] = swapped[second], swapped[first]
    assert any("arrived after" in v.message for v in delivery(swapped))


def failing_events():
    outcome = run_scenario(Calm(), 0, Plan.from_json('[{"at":0.5,"kind":"crash","target":[0,1]}]'))
    assert outcome.violations == []
    return copy.deepcopy(outcome.checked)


def test_reported_once_passes_a_real_trace_and_objects_to_each_broken_rule():
    events = failing_events()
    assert reported_once(events) == []
    reports = [i for i, e in enumerate(events) if isinstance(e, ev.Failure)]
    assert reports, "the crash was reported"
    twice = [*events[: reports[0] + 1], copy.copy(events[reports[0]]), *events[reports[0] + 1 :]]
    assert any("reported twice" in v.message for v in reported_once(twice))
    never = [e for i, e in enumerate(events) if i not in reports and not isinstance(e, ev.Restart)]
    assert any("unreported" in v.message for v in reported_once(never))
