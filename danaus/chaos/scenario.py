"""Scenario: a workload to run under faults, and the invariants it must keep."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from danaus.chaos.history import History
from danaus.chaos.plan import KINDS, FaultKind, Plan, random_plan
from danaus.transports.sim.network import NetworkModel


class Scenario:
    """Subclass it: give `run` (the controller's workload) and `check` (its invariants).

    Faults drawn from a seed happen within the first ``duration`` simulated
    seconds. When `run` returns, every fault heals, the cluster gets ``settle``
    seconds to finish what is in flight, and then the checkers run. A run that
    passes ``max_time`` simulated seconds is cut short (a livelock).
    """

    hosts: int = 3
    duration: float = 10.0
    settle: float = 10.0
    max_time: float = 600.0
    max_faults: int = 5
    kinds: tuple[FaultKind, ...] = KINDS
    endpoints: tuple[tuple[str, str], ...] = ()
    """(mesh name, endpoint) pairs where ``raise`` faults may strike."""
    network: NetworkModel | None = None
    cast_fanout: int | None = None
    """The world's ``cast_fanout`` (None: as ``danaus.configure`` would set it)."""

    def run(self, history: History) -> Any:
        """The workload: controller code, sync or ``async def``, recording into ``history``."""
        raise NotImplementedError

    def check(self, history: History) -> Iterable[str]:
        """Invariants over the history: one message per violation (none when all hold)."""
        return ()

    def plan(self, seed: int, kinds: Iterable[FaultKind] | None = None) -> Plan:
        """The faults seed ``seed`` brings to this scenario (of ``kinds``, default its own)."""
        kinds = self.kinds if kinds is None else tuple(kinds)
        return random_plan(seed, self.hosts, self.duration, kinds, self.max_faults, self.endpoints)

    @property
    def quiet_after(self) -> float:
        """No fault a seed draws outlasts this: each starts within ``duration``, lasts no longer."""
        return 2 * self.duration

    @property
    def name(self) -> str:
        return type(self).__name__
