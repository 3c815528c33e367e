"""Failing seeds of a chaos run, grouped by what broke.

A run over a thousand seeds may fail on a hundred of them, mostly for one or two
reasons. Each failure's *signature* is what its violations say with every number
taken out (keys, times, ranks and seeds differ from seed to seed; the broken rule
does not), so seeds that broke the same rule in the same way fall into one group.
Each group is shown by its smallest seed, the one to replay first.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from danaus.chaos.checkers import Violation
from danaus.chaos.plan import Plan
from danaus.chaos.results import SeedResult
from danaus.chaos.runner import Outcome

_NUMBER = re.compile(r"\d+(?:\.\d+)?(?:e-?\d+)?")


def headline(violation: Violation) -> str:
    """A violation in one line, with numbers as ``N``: the checker, and the message's first
    line, or for an exception (a traceback) its last line, which names the exception."""
    lines = violation.message.strip().splitlines() or [""]
    line = lines[-1] if len(lines) > 1 and lines[1].startswith("Traceback") else lines[0]
    return f"[{violation.checker}] {_NUMBER.sub('N', line.strip())}"


def signature(outcome: Outcome | SeedResult) -> tuple[str, ...]:
    """What broke in ``outcome``: its violations' headlines, each once, in order."""
    return tuple(sorted({headline(v) for v in outcome.violations}))


@dataclass
class Group:
    """Failing seeds with one signature, and the run of the smallest of them to show."""

    signature: tuple[str, ...]
    seeds: list[int]
    outcome: Outcome | SeedResult
    """The smallest seed's run, or what a run over many seeds kept of it; once `shrunk` is
    set, its run with the shrunk plan."""
    shrunk: Plan | None = None
    """The smallest plan that still fails for the smallest seed, if it was shrunk."""

    @property
    def seed(self) -> int:
        return self.outcome.seed


def group_failures(outcomes: Iterable[Outcome | SeedResult]) -> list[Group]:
    """The failed ``outcomes`` by signature: largest group first, then by smallest seed."""
    groups: dict[tuple[str, ...], Group] = {}
    for outcome in sorted((o for o in outcomes if o.failed), key=lambda o: o.seed):
        key = signature(outcome)
        if key in groups:
            groups[key].seeds.append(outcome.seed)
        else:
            groups[key] = Group(key, [outcome.seed], outcome)
    return sorted(groups.values(), key=lambda g: (-len(g.seeds), g.seed))


def seed_list(seeds: list[int], limit: int = 12) -> str:
    """``seeds`` for a person: ``26, 31, 40`` and, past ``limit``, how many more."""
    shown = ", ".join(str(seed) for seed in seeds[:limit])
    return shown if len(seeds) <= limit else f"{shown} and {len(seeds) - limit} more"
