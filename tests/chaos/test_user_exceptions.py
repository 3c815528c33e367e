"""Chaos and calls left waiting on actors whose user code raised: the throw fault, its checker."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import pytest

from danaus.chaos import Fault, Plan, run_scenario, run_seeds
from danaus.chaos.checkers import waits_on_failed
from danaus.core import trace as ev
from danaus.core.waits import Wait
from tests.chaos.scenarios import ThrowsFromUserCode


def test_no_call_waits_on_an_actor_failed_by_a_thrown_base_exception_over_200_seeds():
    outcomes = run_seeds(ThrowsFromUserCode(), range(200))
    assert [(o.seed, o.violations) for o in outcomes if o.failed] == []
    causes = Counter(
        e.cause.split(" raised ")[-1].split(":")[0]
        for o in outcomes
        for e in o.trace.events
        if isinstance(e, ev.Fail)
    )
    assert {"InjectedFatal", "KeyboardInterrupt", "GeneratorExit"} <= set(causes)


def test_a_throw_strikes_at_the_chosen_call():
    plan = Plan(
        (
            Fault(
                at=0.0,
                kind="throw",
                target=("thrower", "work_async"),
                duration=60.0,
                amount=5,
                error="KeyboardInterrupt",
            ),
        )
    )
    outcome = run_scenario(ThrowsFromUserCode(), 0, plan)
    assert outcome.violations == []
    statuses = [op["status"] for op in outcome.history.operations()]
    # Each operation calls the four members: the fifth call of work_async is in the third.
    assert statuses[:3] == ["ok", "ok", "fail"]
    [failed] = [e for e in outcome.trace.events if isinstance(e, ev.Fail)]
    assert "KeyboardInterrupt: fault injected at call 5 of thrower.work_async" in failed.cause


@pytest.mark.parametrize("error", ["", "SystemExit"])
def test_a_throw_names_what_it_raises(error):
    with pytest.raises(ValueError, match="a throw needs an error"):
        Fault(at=0.0, kind="throw", target=("m", "e"), amount=1, error=error)


@dataclass
class _Instance:
    actor_id: str


class _Runtime:
    """Stands in for a runtime with one call still waiting on actor mesh m1 of proc p1."""

    def waits(self) -> list[Wait]:
        return [Wait(_Instance("root/client"), "work", (("p1", "m1"),))]  # type: ignore[arg-type]


def test_the_checker_names_a_call_waiting_on_a_failed_actor():
    fail = ev.Fail(t=1.5, proc="p1", actor="m1/w[0]", cause="endpoint work raised Fatal: x")
    [violation] = waits_on_failed([_Runtime()], [fail])  # type: ignore[list-item]
    assert violation.checker == "waits_on_failed"
    assert "root/client's call of work still waits on m1/w[0]" in violation.message
    assert waits_on_failed([_Runtime()], []) == []  # type: ignore[list-item]
