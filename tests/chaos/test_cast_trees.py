"""Casts along trees of fan-out 2 under random crashes, pauses and network faults."""

from __future__ import annotations

from danaus.chaos import run_seeds
from danaus.core import trace as ev
from tests.chaos.scenarios import CastsAlongTrees

SEEDS = 200


def test_members_see_every_cast_in_order_once_whatever_forwarding_procs_suffer():
    outcomes = run_seeds(CastsAlongTrees(), range(SEEDS), determinism_rate=0.2)
    assert [(o.seed, [str(v) for v in o.violations]) for o in outcomes if o.failed] == []
    adopted = [o.seed for o in outcomes if any(isinstance(e, ev.Adopted) for e in o.trace.events)]
    logs = [entry for o in outcomes for entry in o.history.of("log")]
    assert adopted, "no seed lost a forwarding proc while it held a cast"
    assert len(logs) > SEEDS * 5
