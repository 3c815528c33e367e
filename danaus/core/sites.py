"""Fault sites: named places in the runtime where a chaos run may inject delay or failure.

In the spirit of FoundationDB's BUGGIFY: a chaos run switches some sites on
(chosen by its seed) and each hit of a live site may slow or break what
happens there. A world holds its run's sites (`World.sites`); outside chaos
runs it holds none, and every site costs one attribute check.

Sites:

* ``spawn``: delay before an actor's ``__init__`` (a slow start);
* ``reply``: delay before an endpoint's answer is sent (a slow reply);
* endpoint exceptions: a call to a chosen endpoint of a chosen actor mesh
  raises `InjectedFault` instead of running (with some probability per call),
  or a chosen exception, `Exception` or `BaseException`, at its n-th call, as
  if user code had raised it there.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from danaus.core.faults import Heal


class InjectedFault(Exception):
    """Raised in place of an endpoint by a chaos run's fault site."""


class InjectedFatal(BaseException):
    """A `BaseException` (not an `Exception`) raised in place of an endpoint: it fails the actor."""


THROWABLE: dict[str, type[BaseException]] = {
    "InjectedFault": InjectedFault,
    "InjectedFatal": InjectedFatal,
    "KeyboardInterrupt": KeyboardInterrupt,
    "GeneratorExit": GeneratorExit,
}
"""What a ``throw`` fault may raise, by name: exceptions user code can raise in an endpoint."""


@dataclass
class _Throw:
    error: type[BaseException]
    at_call: int
    calls: int = 0


@dataclass
class Sites:
    """Which sites are live in this run, and how they behave."""

    rng: random.Random
    delays: dict[str, tuple[float, float]] = field(default_factory=dict)
    """site -> (probability per hit, largest delay in seconds)."""
    raises: dict[tuple[str, str], float] = field(default_factory=dict)
    """(mesh name, endpoint) -> probability per call."""
    throws: dict[tuple[str, str], _Throw] = field(default_factory=dict)
    """(mesh name, endpoint) -> what to raise, and at which call."""

    @classmethod
    def from_seed(cls, seed: int, rng: random.Random) -> Sites:
        """Switch each delay site on with probability 1/3, with parameters drawn from ``seed``."""
        draw = random.Random(f"sites-{seed}")
        delays = {}
        for site in ("spawn", "reply"):
            if draw.random() < 1 / 3:
                delays[site] = (draw.uniform(0.05, 0.5), draw.uniform(0.001, 0.5))
        return cls(rng, delays)

    def delay(self, site: str) -> float:
        """Seconds to wait at ``site`` this time (0 when the site is off or does not fire)."""
        rule = self.delays.get(site)
        if rule is None or self.rng.random() >= rule[0]:
            return 0.0
        return self.rng.uniform(0, rule[1])

    def check_call(self, mesh: str, endpoint: str) -> None:
        """A call to ``endpoint`` of actor mesh ``mesh`` starts: raise if a fault says so."""
        key = (mesh, endpoint)
        probability = self.raises.get(key)
        if probability is not None and self.rng.random() < probability:
            raise InjectedFault(f"fault injected at {mesh}.{endpoint}")
        throw = self.throws.get(key)
        if throw is not None:
            throw.calls += 1
            if throw.calls == throw.at_call:
                raise throw.error(f"fault injected at call {throw.at_call} of {mesh}.{endpoint}")

    def raise_at(self, mesh: str, endpoint: str, probability: float) -> Heal:
        """Make calls to ``endpoint`` of actor mesh ``mesh`` raise, until healed."""
        key = (mesh, endpoint)
        self.raises[key] = probability

        def heal() -> None:
            self.raises.pop(key, None)

        return heal

    def throw_at(self, mesh: str, endpoint: str, error: str, at_call: int) -> Heal:
        """Make the ``at_call``-th call to ``endpoint`` of ``mesh`` from now raise ``error``."""
        key = (mesh, endpoint)
        self.throws[key] = _Throw(THROWABLE[error], at_call)

        def heal() -> None:
            self.throws.pop(key, None)

        return heal
