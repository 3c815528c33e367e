"""Fault plans: what goes wrong, where, when, and for how long.

A `Plan` is a list of `Fault`s, each at a time (simulated seconds from the
start of the scenario) against a target, lasting ``duration`` seconds before
it heals. Plans are written by hand (an explicit schedule) or drawn from a seed
(`random_plan`), in which case the rates of each kind of fault are drawn from
the seed too, so that some seeds are calm and others stormy.

Targets name things that exist before the program runs: hosts by index, links
between two hosts, procs as "the n-th live worker proc on host h" (chosen
when the fault fires, among the procs alive then), and an actor's thread as
"the a-th actor of that proc".

Adding a kind to the kinds a seed draws from changes the plan of every seed.
So the kinds added since seeds were first drawn are opt-in (`EXTRA_KINDS`,
`TIMING_KINDS`), and what a fault of such a kind draws beyond what every fault
draws is drawn after it: a scenario that does not list them gets, for every
seed, the plan it always had.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

FaultKind = Literal[
    "crash",
    "crash_host",
    "pause",
    "slow",
    "delay",
    "clog",
    "partition",
    "bandwidth",
    "raise",
    "throw",
    "clock_jump",
    "slow_cpu",
    "pause_thread",
]
EXTRA_KINDS: tuple[FaultKind, ...] = ("throw",)
"""Kinds a scenario opts into (``kinds = KINDS + EXTRA_KINDS``)."""
TIMING_KINDS: tuple[FaultKind, ...] = ("clock_jump", "slow_cpu", "pause_thread")
"""A proc's clock, CPU and threads: kinds a scenario opts into (``kinds = KINDS + TIMING_KINDS``).
Only the simulator applies them."""
ALL_KINDS: tuple[FaultKind, ...] = get_args(FaultKind)
KINDS: tuple[FaultKind, ...] = tuple(
    k for k in ALL_KINDS if k not in EXTRA_KINDS and k not in TIMING_KINDS
)
"""The kinds seeds draw unless a scenario says otherwise."""
THROWN = ("InjectedFault", "InjectedFatal", "KeyboardInterrupt", "GeneratorExit")
"""What a drawn ``throw`` raises: an `Exception` or a `BaseException` (see `danaus.core.sites`)."""
NETWORK_KINDS: tuple[FaultKind, ...] = ("slow", "delay", "clog", "partition", "bandwidth")
"""The kinds that need a world in control of the network (the simulator's model)."""
SITE_KINDS: tuple[FaultKind, ...] = ("raise", "throw")
"""The kinds that need fault sites in every proc (the simulator, where all procs are local)."""
INSTANT_KINDS: tuple[FaultKind, ...] = ("crash", "crash_host")
"""The kinds that have no duration: nothing comes back to heal."""
PROC_KINDS: tuple[FaultKind, ...] = ("crash", "pause", "slow", "clock_jump", "slow_cpu")
"""The kinds whose target is a proc, ``(host, slot)``."""
AMOUNTS: dict[FaultKind, tuple[float, float]] = {
    "slow": (0.001, 0.2),
    "delay": (0.001, 0.5),
    "bandwidth": (0.001, 0.5),
    "raise": (0.1, 1.0),
}
"""The range a drawn fault's ``amount`` comes from, for the kinds that have one."""
CLOCK_JUMPS = (1.0, 600.0)
"""The range of a drawn clock jump's size in seconds (forward or back, as drawn)."""
CPU_FACTORS = (2.0, 1000.0)
"""The range of a drawn ``slow_cpu`` fault's factor."""


def usable_kinds(
    kinds: Sequence[FaultKind], hosts: int, endpoints: Sequence[tuple[str, str]]
) -> list[FaultKind]:
    """The ``kinds`` that have a target: endpoint faults need endpoints, links two hosts."""
    return [
        k
        for k in kinds
        if (k not in ("raise", "throw") or endpoints)
        and (hosts > 1 or k not in ("delay", "clog", "partition"))
    ]


@dataclass(frozen=True)
class Fault:
    """One fault.

    ``target`` by kind:

    * crash, pause, slow, clock_jump, slow_cpu: ``(host, slot)``: live worker
      proc number ``slot`` (modulo their count) on host ``host``;
    * pause_thread: ``(host, slot, actor)``: the thread of actor number
      ``actor`` (modulo their count, in the order they were spawned) of that proc;
    * crash_host, bandwidth: ``(host,)``;
    * delay, clog: ``(host_a, host_b)``, both directions;
    * partition: the hosts on one side; with ``one_way`` only their sending
      to the other side is cut;
    * raise: ``(mesh_name, endpoint)``: calls there raise ``InjectedFault``;
    * throw: ``(mesh_name, endpoint)``: the call number ``amount`` there (counted
      from when the fault applies) raises ``error``, one of `THROWN`.

    ``amount`` is the fault's strength: the pause's length is ``duration``; for
    slow and delay, added seconds per message; for bandwidth, the remaining
    fraction; for raise, the probability per call; for throw, which call; for
    clock_jump, the seconds the proc's clock jumps by (negative: back), until
    ``duration`` later it is set right; for slow_cpu, how many times slower the
    proc's CPU runs.
    """

    at: float
    kind: FaultKind
    target: tuple[Any, ...]
    duration: float = 0.0
    amount: float = 0.0
    one_way: bool = False
    error: str = ""

    def __post_init__(self) -> None:
        if self.kind not in ALL_KINDS:
            raise ValueError(f"unknown fault kind {self.kind!r}; kinds are {', '.join(ALL_KINDS)}")
        if self.at < 0 or self.duration < 0:
            raise ValueError("a fault's time and duration must not be negative")
        if self.kind == "throw" and (self.error not in THROWN or self.amount < 1):
            raise ValueError(f"a throw needs an error among {', '.join(THROWN)} and a call >= 1")
        if self.kind == "slow_cpu" and self.amount < 1:
            raise ValueError("a slow_cpu fault needs a factor (its amount) of at least 1")
        object.__setattr__(self, "target", tuple(self.target))
        if self.kind == "pause_thread" and len(self.target) != 3:
            raise ValueError("a pause_thread fault's target is (host, proc slot, actor slot)")

    def describe(self) -> str:
        target = {
            "crash": "proc {1} of host h{0}",
            "pause": "proc {1} of host h{0}",
            "slow": "proc {1} of host h{0}",
            "crash_host": "host h{0}",
            "bandwidth": "host h{0}",
            "delay": "link h{0}<->h{1}",
            "clog": "link h{0}<->h{1}",
            "raise": "endpoint {0}.{1}",
            "throw": "endpoint {0}.{1}",
            "clock_jump": "proc {1} of host h{0}",
            "slow_cpu": "proc {1} of host h{0}",
            "pause_thread": "actor {2} of proc {1} of host h{0}",
        }.get(self.kind)
        if target is None:
            side = ",".join(f"h{h}" for h in self.target)
            where = f"hosts {side} {'->' if self.one_way else '<->'} the rest"
        else:
            where = target.format(*self.target)
        text = f"t={self.at:.3f}s {self.kind} {where}"
        if self.kind == "throw":
            return f"{text} raises {self.error} at call {self.amount:g}"
        if self.kind == "clock_jump":
            text += f" by {self.amount:+.3f}s"
        elif self.kind == "slow_cpu":
            text += f" {self.amount:.4g}x slower"
        elif self.amount:
            text += f" amount={self.amount:.4g}"
        if self.duration:
            text += f" for {self.duration:.3f}s"
        return text

    def to_json(self) -> dict[str, Any]:
        data = {
            "at": self.at,
            "kind": self.kind,
            "target": list(self.target),
            "duration": self.duration,
            "amount": self.amount,
            "one_way": self.one_way,
        }
        return {**data, "error": self.error} if self.error else data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Fault:
        return cls(
            at=float(data["at"]),
            kind=data["kind"],
            target=tuple(data["target"]),
            duration=float(data.get("duration", 0.0)),
            amount=float(data.get("amount", 0.0)),
            one_way=bool(data.get("one_way", False)),
            error=str(data.get("error", "")),
        )


@dataclass(frozen=True)
class Plan:
    """Faults in time order."""

    faults: tuple[Fault, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        object.__setattr__(self, "faults", tuple(sorted(self.faults, key=lambda f: f.at)))

    def __len__(self) -> int:
        return len(self.faults)

    def __iter__(self) -> Any:
        return iter(self.faults)

    def describe(self) -> str:
        return "\n".join(f.describe() for f in self.faults) or "(no faults)"

    def to_json(self) -> str:
        return json.dumps([f.to_json() for f in self.faults], separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> Plan:
        """The plan `to_json` wrote; `ValueError` saying what is wrong if ``text`` is not one."""
        try:
            return cls(tuple(Fault.from_json(item) for item in json.loads(text)))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            detail = f"no field {exc}" if isinstance(exc, KeyError) else str(exc)
            raise ValueError(
                "not a fault plan: expected a JSON list of faults, as a replay command of a "
                f"shrunk failure gives ({detail})"
            ) from None

    def without(self, indices: Iterable[int]) -> Plan:
        drop = set(indices)
        return Plan(tuple(f for i, f in enumerate(self.faults) if i not in drop))


def random_plan(
    seed: int,
    hosts: int,
    duration: float,
    kinds: Sequence[FaultKind] = KINDS,
    max_faults: int = 5,
    endpoints: Sequence[tuple[str, str]] = (),
) -> Plan:
    """The faults seed ``seed`` draws for a run of ``duration`` seconds on ``hosts`` hosts."""
    rng = random.Random(f"plan-{seed}")
    kinds = usable_kinds(kinds, hosts, endpoints)
    if not kinds:
        return Plan()
    weights = [rng.random() ** 2 for _ in kinds]
    count = rng.randint(0, max_faults)
    faults = []
    for _ in range(count):
        kind = rng.choices(kinds, weights)[0]
        at = round(rng.uniform(0, duration), 6)
        length = round(min(duration, rng.expovariate(1 / 2.0)), 6)
        host = rng.randrange(hosts)
        if kind in PROC_KINDS:
            target: tuple[Any, ...] = (host, rng.randrange(8))
        elif kind == "pause_thread":
            target = (host, rng.randrange(8), rng.randrange(8))
        elif kind in ("crash_host", "bandwidth"):
            target = (host,)
        elif kind in ("delay", "clog"):
            other = rng.choice([h for h in range(hosts) if h != host])
            target = (host, other)
        elif kind == "partition":
            side = rng.sample(range(hosts), rng.randint(1, hosts - 1))
            target = tuple(sorted(side))
        else:
            target = rng.choice(list(endpoints))
        # An amount for every kind, whichever was drawn: each seed keeps the plan it always had.
        amounts = {k: rng.uniform(low, high) for k, (low, high) in AMOUNTS.items()}
        error = ""
        if kind == "throw":
            amounts[kind], error = rng.randint(1, 5), rng.choice(THROWN)
        elif kind == "clock_jump":
            amounts[kind] = rng.choice((-1, 1)) * rng.uniform(*CLOCK_JUMPS)
        elif kind == "slow_cpu":
            amounts[kind] = rng.uniform(*CPU_FACTORS)
        faults.append(
            Fault(
                at=at,
                kind=kind,
                target=target,
                duration=0.0 if kind in INSTANT_KINDS else length,
                amount=round(amounts.get(kind, 0.0), 6),
                one_way=kind == "partition" and rng.random() < 0.3,
                error=error,
            )
        )
    return Plan(tuple(faults))
