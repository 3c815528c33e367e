"""Running scenarios: one seed, many seeds, replays, and shrinking a failing plan.

A run on the simulator: a fresh simulated cluster seeded with the seed, the
scenario's workload on it while the nemesis applies the plan, then every
fault healed, ``settle`` seconds for the cluster to quiet down, and the
checkers. The same seed gives the same run, byte for byte: `Outcome.digest`.

On a real transport the same steps run on real processes; only the crash and
pause faults apply, and timing is whatever the machine gives.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import random
import shlex
import threading
import time
import traceback
from collections.abc import Callable, Coroutine, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from danaus.chaos.checkers import (
    Violation,
    delivery,
    liveness,
    reported_once,
    survivors,
    waits_on_failed,
)
from danaus.chaos.history import History
from danaus.chaos.nemesis import Nemesis
from danaus.chaos.plan import NETWORK_KINDS, SITE_KINDS, TIMING_KINDS, FaultKind, Plan
from danaus.chaos.scenario import Scenario
from danaus.core import config
from danaus.core.errors import SupervisionError
from danaus.core.sites import Sites
from danaus.core.supervision import MeshFailure
from danaus.core.trace import Event, Trace
from danaus.core.transport import World
from danaus.tracing import gather_events
from danaus.transports.sim.loop import SimulationStalled, SimulationTimeLimit


@dataclass
class Outcome:
    """What one run did and whether every check held."""

    scenario: str
    seed: int
    plan: Plan
    violations: list[Violation]
    trace: Trace
    history: History
    transport: str = "sim"
    value: Any = None
    skipped: list[str] = field(default_factory=list)
    checked: list[Event] = field(default_factory=list)
    """The trace events the checkers read: those before the checks began probing the cluster."""

    @property
    def failed(self) -> bool:
        return bool(self.violations)

    @property
    def digest(self) -> str:
        return self.trace.digest()


def _record_unhandled(history: History) -> Callable[[MeshFailure], None]:
    def record(failure: MeshFailure) -> None:
        history.record(
            "unhandled", mesh=failure.mesh_name, rank=dict(failure.rank), cause=failure.cause
        )

    return record


class _Run:
    """One run of a scenario against a plan, on the current world."""

    def __init__(self, scenario: Scenario, world: World) -> None:
        self.scenario = scenario
        self.world = world
        self.history = History(world.loop.time, world.trace)
        self.violations: list[Violation] = []
        self.value: Any = None
        self.events: list[Event] = []

    def workload(self) -> None:
        try:
            result = self.scenario.run(self.history)
            if inspect.iscoroutine(result):
                result = self._wait(result)
            self.value = result
        except (SimulationStalled, SimulationTimeLimit) as exc:
            self.violations.append(Violation("liveness", f"the workload never finished: {exc}"))
        except Exception as exc:
            detail = "".join(traceback.format_exception(exc)).rstrip()
            self.violations.append(Violation("workload", f"run() raised:\n{detail}"))

    def check(self, nemesis: Nemesis) -> None:
        scenario = self.scenario
        self._on_loop(nemesis.heal_all)
        try:
            self._settle(scenario.settle)
        except (SimulationStalled, SimulationTimeLimit) as exc:
            self.violations.append(Violation("liveness", f"the cluster never settled: {exc}"))
        self.violations += liveness(self.world.local_runtimes())
        cut = self.world.loop.time()
        try:
            procs = [self.world.root.proc_id, *self.world.live_workers()]
            self.violations += self._wait(survivors(procs, scenario.settle))
            events = self._wait(gather_events(self.world, scenario.settle))
        except (SimulationStalled, SimulationTimeLimit) as exc:
            self.violations.append(Violation("survivors", f"probing the actors stalled: {exc}"))
            events = list(self.world.trace.events)
        self.events = [e for e in events if e.t < cut]
        self.violations += delivery(self.events) + reported_once(self.events)
        self.violations += waits_on_failed(self.world.local_runtimes(), self.events)
        self.violations += [Violation("invariant", m) for m in scenario.check(self.history)]

    def stop(self) -> None:
        """Stop what the workload left running, each mesh within ``settle`` seconds: an actor
        still stuck in a call then (the checks have said so) is abandoned, instead of being
        waited for as long as a graceful stop may take. A mesh on a host that is gone cannot
        be stopped through it; shutdown stops what is left."""
        with contextlib.suppress(SupervisionError):
            self._wait(self.world.root.client.stop_owned(self.scenario.settle))

    def _settle(self, seconds: float) -> None:
        """Let the cluster run ``seconds`` (a real one: only while calls are pending)."""
        if self.world.deterministic:
            self.world.loop.run_until_complete(asyncio.sleep(seconds))
            return
        root = self.world.root
        deadline = time.monotonic() + seconds
        while liveness([root]) and time.monotonic() < deadline:
            time.sleep(0.05)

    def _wait(self, coro: Coroutine[Any, Any, Any]) -> Any:
        """Run ``coro`` on the world's loop: drive it if idle, else wait from this thread."""
        loop = self.world.loop
        if not loop.is_running():
            return loop.run_until_complete(coro)
        return asyncio.run_coroutine_threadsafe(coro, loop).result()

    def _on_loop(self, fn: Callable[[], None]) -> None:
        """Call ``fn`` on the loop's thread and wait (at most 10 s) until it has returned."""
        done = threading.Event()

        def call() -> None:
            try:
                fn()
            finally:
                done.set()

        self.world.root.on_loop(call)
        done.wait(10)


class ChaosFailure(AssertionError):
    """A seed broke a rule: the message holds its plan, violations and replay command."""


def applicable_kinds(kinds: Iterable[FaultKind], world: World) -> list[FaultKind]:
    """The ``kinds`` of fault ``world`` can apply (all of them on the simulator)."""
    return [
        kind
        for kind in kinds
        if (kind not in NETWORK_KINDS or kind in world.faults.network_faults)
        and (kind not in TIMING_KINDS or kind in world.faults.timing_faults)
        and (kind not in SITE_KINDS or world.sites is not None)
    ]


def replay_command(target: str, seed: int, plan: Plan | None = None, transport: str = "sim") -> str:
    """The one-line command that reruns ``seed`` (with ``plan``, if it is not the seed's own)."""
    parts = ["danaus", "chaos", "replay", target, "--seed", str(seed)]
    if plan is not None:
        parts += ["--plan", plan.to_json()]
    if transport != "sim":
        parts += ["--transport", transport]
    return shlex.join(parts)


def check_seed(scenario: Scenario, seed: int, plan: Plan | None = None, **options: Any) -> None:
    """Run one seed and raise `ChaosFailure` describing it if any check failed."""
    outcome = run_scenario(scenario, seed, plan, **options)
    if outcome.failed:
        violations = "\n".join(f"  {v}" for v in outcome.violations)
        command = replay_command(f"PATH::{scenario.name}", seed, plan, outcome.transport)
        raise ChaosFailure(
            f"{scenario.name} seed {seed} failed\nplan:\n{outcome.plan.describe()}\n"
            f"violations:\n{violations}\nreplay: {command}"
        )


def run_scenario(
    scenario: Scenario,
    seed: int,
    plan: Plan | None = None,
    transport: str = "sim",
    **options: Any,
) -> Outcome:
    """Run ``scenario`` once with ``seed`` (and its plan, or ``plan``) and check it.

    ``options`` configure a real transport (heartbeat settings, for example). A
    seed draws only the kinds of fault the transport's world can apply.
    """
    if config.installed() is not None:
        raise RuntimeError("a chaos run needs its own world: call danaus.shutdown() first")
    if transport == "sim":
        options = {
            "hosts": scenario.hosts,
            "seed": seed,
            "network": scenario.network,
            "time_limit": scenario.max_time,
        }
    else:
        options = {"trace": True, **options}
    if scenario.cast_fanout is not None:
        options["cast_fanout"] = scenario.cast_fanout
    world = config.create_world(transport=transport, **options)
    config.install(world)
    run = _Run(scenario, world)
    world.fault_hook = _record_unhandled(run.history)
    if world.deterministic:
        world.sites = Sites.from_seed(seed, random.Random(f"site-draws-{seed}"))
    if plan is None:
        plan = scenario.plan(seed, applicable_kinds(scenario.kinds, world))
    nemesis = Nemesis(world, plan)
    try:
        nemesis.start()
        run.workload()
        run.check(nemesis)
        run.stop()
    finally:
        config.shutdown()
    return Outcome(
        scenario=scenario.name,
        seed=seed,
        plan=plan,
        violations=run.violations,
        trace=world.trace,
        history=run.history,
        transport=transport,
        value=run.value,
        skipped=[f"{fault.describe()}: {why}" for fault, why in nemesis.skipped],
        checked=run.events,
    )


def check_determinism(scenario: Scenario, seed: int, first: Outcome) -> Violation | None:
    """Run ``seed`` again: a different trace digest is a violation (the run is not replayable)."""
    again = run_scenario(scenario, seed, first.plan)
    if again.digest != first.digest:
        return Violation(
            "determinism",
            f"seed {seed} gave trace digests {first.digest[:16]} and {again.digest[:16]}",
        )
    return None


def shrink(
    scenario: Scenario, seed: int, plan: Plan, transport: str = "sim"
) -> tuple[Plan, Outcome]:
    """The smallest sub-plan of ``plan`` that still fails (delta debugging over its faults)."""
    best = run_scenario(scenario, seed, plan, transport)
    if not best.failed:
        raise ValueError("the plan does not fail; there is nothing to shrink")
    chunks = 2
    while len(plan) >= 2:
        size = max(1, len(plan) // chunks)
        removed_any = False
        for start in range(0, len(plan), size):
            candidate = plan.without(range(start, start + size))
            outcome = run_scenario(scenario, seed, candidate, transport)
            if outcome.failed:
                plan, best = candidate, outcome
                chunks = max(chunks - 1, 2)
                removed_any = True
                break
        if not removed_any:
            if size == 1:
                break
            chunks = min(len(plan), chunks * 2)
    if len(plan) == 1:
        empty = run_scenario(scenario, seed, Plan(), transport)
        if empty.failed:
            plan, best = Plan(), empty
    return plan, best


def seed_range(text: str) -> range:
    """``START:STOP`` (or one seed, ``N``) as a range of at least one seed; `ValueError` names
    the expected form."""
    start, sep, stop = text.partition(":")
    try:
        seeds = range(int(start), int(stop)) if sep else range(int(start), int(start) + 1)
    except ValueError:
        raise ValueError(f"seeds are START:STOP or N, got {text!r}") from None
    if not seeds:
        raise ValueError(f"{text} holds no seed: STOP ({seeds.stop}) must be above START")
    return seeds


def checks_determinism(seed: int, rate: float) -> bool:
    """Whether ``seed`` is one of the sample, a fraction ``rate`` of all seeds, run twice to
    check its replay. Drawn from the seed alone: a slice of a range samples as the whole does."""
    return rate > 0 and random.Random(f"determinism-{seed}").random() < rate


def iter_seeds(
    scenario: Scenario,
    seeds: Iterable[int],
    *,
    determinism_rate: float = 0.0,
    transport: str = "sim",
) -> Iterator[Outcome]:
    """Run every seed, yielding each outcome as it ends (a long run need not keep them all); a
    sample (``determinism_rate``) is run twice to check replayability."""
    deterministic = config.transport_module(transport).World.deterministic
    for seed in seeds:
        outcome = run_scenario(scenario, seed, transport=transport)
        if deterministic and checks_determinism(seed, determinism_rate):
            problem = check_determinism(scenario, seed, outcome)
            if problem is not None:
                outcome.violations.append(problem)
        yield outcome


def run_seeds(
    scenario: Scenario,
    seeds: Iterable[int],
    *,
    determinism_rate: float = 0.0,
    transport: str = "sim",
    progress: Callable[[Outcome], None] | None = None,
) -> list[Outcome]:
    """Run every seed; a sample (``determinism_rate``) is run twice to check replayability."""
    outcomes = []
    for outcome in iter_seeds(
        scenario, seeds, determinism_rate=determinism_rate, transport=transport
    ):
        outcomes.append(outcome)
        if progress is not None:
            progress(outcome)
    return outcomes
