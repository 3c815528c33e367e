"""What the chaos testing tutorial (docs/chaos.md) tells of BuggyKV's seed 26 is what happens."""

from __future__ import annotations

from pathlib import Path

import pytest
from docs_hooks import PLAN, SEED, buggy_kv_page
from kvstore import BuggyKV, KVStore

from danaus.chaos import Plan, run_scenario, shrink
from danaus.core import trace as ev

ROOT = Path(__file__).resolve().parents[2]

TUTORIAL = (ROOT / "docs" / "chaos.md").read_text()


def lost(keys: range) -> list[str]:
    return [f"acknowledged write k{k}={k} lost (store has None)" for k in keys]


@pytest.mark.danaus_default_schedule
def test_the_seed_fails_and_shrinks_to_the_crash_the_tutorial_shows():
    outcome = run_scenario(BuggyKV(), SEED)
    assert [v.message for v in outcome.violations] == lost(range(43, 47))
    assert len(outcome.plan) == 5
    smallest, shrunk = shrink(BuggyKV(), SEED, outcome.plan)
    assert smallest == Plan.from_json(PLAN)
    assert smallest.describe() == "t=4.892s crash proc 2 of host h1"
    assert [v.message for v in shrunk.violations] == lost(range(45, 49))
    assert PLAN in TUTORIAL and smallest.describe() in TUTORIAL


@pytest.mark.danaus_default_schedule
def test_the_story_of_the_picture():
    """The primary's last batch leaves at 4.550 s, four acknowledged puts follow, then the crash."""
    events = run_scenario(BuggyKV(), SEED, Plan.from_json(PLAN)).trace.events
    batches = [e for e in events if isinstance(e, ev.CallSent) and e.method == "apply"]
    assert round(batches[-1].t, 3) == 4.550
    crash = next(e for e in events if isinstance(e, ev.Down) and e.reason == "was killed")
    assert (crash.proc, round(crash.t, 3)) == ("root:1.0", 4.892)
    acked = [
        e
        for e in events
        if isinstance(e, ev.HistoryRecorded) and e.event == "ok" and batches[-1].t < e.t < crash.t
    ]
    assert len(acked) == 4
    assert "<svg" in buggy_kv_page()


def test_the_fix_passes_the_seed():
    assert not run_scenario(KVStore(), SEED).failed
