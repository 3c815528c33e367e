"""What a run over many seeds keeps of each seed: enough to group, report and replay it.

An `Outcome` holds a seed's whole run: its trace, its history, every event
the checkers read. A run over a million seeds cannot keep that many, and a
run spread over the nodes of a cluster must write each seed's result to a
file and read it back. A `SeedResult` is the part that lasts: the seed, how
long it took, and, for a seed that failed, its plan and its violations (from
which its group and its replay command follow). It is one line of JSON.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from danaus.chaos.checkers import Violation
from danaus.chaos.plan import Fault, Plan
from danaus.chaos.runner import Outcome


@dataclass(frozen=True)
class SeedResult:
    """One seed of a run: its wall-clock seconds, and for a failing seed what broke."""

    seed: int
    duration: float
    violations: tuple[Violation, ...] = ()
    plan: Plan | None = None
    """The seed's plan, kept for a failing seed only."""

    @property
    def failed(self) -> bool:
        return bool(self.violations)

    @classmethod
    def of(cls, outcome: Outcome, duration: float) -> SeedResult:
        """The result of ``outcome``, a run that took ``duration`` seconds."""
        if not outcome.failed:
            return cls(outcome.seed, duration)
        return cls(outcome.seed, duration, tuple(outcome.violations), outcome.plan)

    def to_json(self) -> str:
        """One line of JSON (`from_json` reads it back)."""
        data: dict[str, Any] = {"seed": self.seed, "duration": round(self.duration, 6)}
        if self.failed:
            data["violations"] = [[v.checker, v.message] for v in self.violations]
            data["plan"] = [fault.to_json() for fault in self.plan or ()]
        return json.dumps(data, separators=(",", ":"))

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SeedResult:
        """The result `to_json` wrote, parsed (`KeyError`, `TypeError` or `ValueError` if not)."""
        violations = tuple(Violation(str(c), str(m)) for c, m in data.get("violations", ()))
        plan = Plan(tuple(Fault.from_json(f) for f in data["plan"])) if violations else None
        return cls(int(data["seed"]), float(data["duration"]), violations, plan)
