"""Hypothesis strategies for fault plans: let Hypothesis search for, and shrink, failing plans.

    @given(plan=plans(hosts=3, duration=6.0))
    @settings(deadline=None)
    def test_store_keeps_acknowledged_writes(plan):
        assert not run_scenario(KVStore(), seed=0, plan=plan).failed

On failure Hypothesis shrinks the plan: fewer faults, earlier, shorter, simpler.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hypothesis import strategies as st

from danaus.chaos.plan import (
    AMOUNTS,
    CLOCK_JUMPS,
    CPU_FACTORS,
    INSTANT_KINDS,
    KINDS,
    PROC_KINDS,
    THROWN,
    Fault,
    FaultKind,
    Plan,
    usable_kinds,
)


@st.composite
def faults(
    draw: Any,
    hosts: int,
    duration: float,
    kinds: Sequence[FaultKind] = KINDS,
    endpoints: Sequence[tuple[str, str]] = (),
) -> Fault:
    """One fault of ``kinds`` within ``duration`` seconds on a cluster of ``hosts`` hosts."""
    kind = draw(st.sampled_from(usable_kinds(kinds, hosts, endpoints)))
    host = draw(st.integers(0, hosts - 1))
    if kind in PROC_KINDS:
        target: tuple[Any, ...] = (host, draw(st.integers(0, 7)))
    elif kind == "pause_thread":
        target = (host, draw(st.integers(0, 7)), draw(st.integers(0, 7)))
    elif kind in ("crash_host", "bandwidth"):
        target = (host,)
    elif kind in ("delay", "clog"):
        target = (host, draw(st.sampled_from([h for h in range(hosts) if h != host])))
    elif kind == "partition":
        side = draw(st.sets(st.integers(0, hosts - 1), min_size=1, max_size=hosts - 1))
        target = tuple(sorted(side))
    else:
        target = draw(st.sampled_from(list(endpoints)))
    throw = kind == "throw"
    if throw:
        amount: float = draw(st.integers(1, 5))
    elif kind == "clock_jump":
        size = draw(st.floats(*CLOCK_JUMPS))
        amount = size if draw(st.booleans()) else -size
    elif kind == "slow_cpu":
        amount = draw(st.floats(*CPU_FACTORS))
    else:
        amount = draw(st.floats(*AMOUNTS[kind])) if kind in AMOUNTS else 0.0
    return Fault(
        at=draw(st.floats(0, duration, allow_nan=False)),
        kind=kind,
        target=target,
        duration=0.0 if kind in INSTANT_KINDS else draw(st.floats(0, duration)),
        amount=amount,
        one_way=kind == "partition" and draw(st.booleans()),
        error=draw(st.sampled_from(THROWN)) if throw else "",
    )


def plans(
    hosts: int,
    duration: float,
    kinds: Sequence[FaultKind] = KINDS,
    endpoints: Sequence[tuple[str, str]] = (),
    max_faults: int = 6,
) -> st.SearchStrategy[Plan]:
    """Plans of up to ``max_faults`` faults; they shrink toward fewer and simpler faults."""
    return st.lists(faults(hosts, duration, kinds, endpoints), max_size=max_faults).map(
        lambda found: Plan(tuple(found))
    )
