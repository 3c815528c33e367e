"""Faults of a proc's timing on the simulator: its clocks jump, its CPU slows down, one of its
actors' threads stops. Each applies from an explicit plan and from seeds, deterministically;
real transports refuse them, saying why."""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import time
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import find

import danaus
import danaus.sim
from danaus import Actor, SupervisionError, context, endpoint, hosts
from danaus.chaos import TIMING_KINDS, Fault, FaultUnsupported, Plan, random_plan, run_scenario
from danaus.chaos.nemesis import Nemesis
from danaus.chaos.plan import EXTRA_KINDS, KINDS
from danaus.chaos.runner import applicable_kinds
from danaus.chaos.strategies import plans
from danaus.core import config
from danaus.core import trace as ev
from danaus.transports.sim.clocks import BOOTED, EPOCH
from tests.chaos.scenarios import TimingStorm

HANDLING = danaus.sim.NetworkModel().handling


class Clock(Actor):
    @endpoint
    def read(self) -> tuple[str, float, float]:
        return context().actor_instance.proc_id, time.time(), time.monotonic()

    @endpoint
    def ping(self) -> int:
        return 1

    @endpoint
    async def ticks(self, n: int, every: float) -> list[float]:
        """The simulation's time at each of ``n`` steps ``every`` seconds apart."""
        loop = asyncio.get_running_loop()
        seen = []
        for _ in range(n):
            seen.append(loop.time())
            await asyncio.sleep(every)
        return seen

    @endpoint
    def sync_ticks(self, n: int, every: float) -> list[float]:
        """The same, from sync code: its monotonic clock, less where it starts at time 0."""
        seen = []
        for _ in range(n):
            seen.append(time.monotonic() - BOOTED)
            time.sleep(every)
        return seen


def under(plan: Plan, body: Callable[[], Any], seed: int = 0) -> danaus.sim.SimRun:
    """Run ``body`` on two simulated hosts while a nemesis applies ``plan``."""

    def main() -> Any:
        Nemesis(config.current_world(), plan).start()
        return body()

    return danaus.sim.run(main, hosts=2, seed=seed)


def now() -> float:
    return config.current_world().loop.time()


# ---- clock jumps -------------------------------------------------------------------------

JUMPS = Plan(
    (
        Fault(at=1.0, kind="clock_jump", target=(1, 0), duration=2.0, amount=-30.0),
        Fault(at=4.0, kind="clock_jump", target=(1, 0), duration=1.0, amount=45.0),
    )
)


def read_clocks() -> dict[str, Any]:
    """Every half second, both procs' clocks, as their code reads them."""
    clocks = hosts().slice(hosts=1).spawn_procs(per_host={"p": 2}).spawn("clocks", Clock)
    readings = []
    for step in range(13):
        time.sleep(0.25 + step * 0.5 - now())
        found = {proc: (wall, mono) for proc, wall, mono in clocks.read.call().get().values()}
        readings.append((now(), found))
    return {"jumped": config.current_world().faults.workers("h1")[0], "readings": readings}


def test_a_clock_jumps_back_and_forward_in_one_proc_only():
    real = time.time()
    run = under(JUMPS, read_clocks)
    assert abs(time.time() - real) < 600  # the controller's code reads the machine's clock
    jumped = run.value["jumped"]
    for t, found in run.value["readings"]:
        (wall, mono), [(other_wall, other_mono)] = (
            found.pop(jumped),
            list(found.values()),
        )
        offset = -30.0 if 1.0 <= t < 3.0 else 45.0 if 4.0 <= t < 5.0 else 0.0
        lead = 45.0 if t >= 4.0 else 0.0  # a monotonic clock goes forward only, and stays
        assert wall - other_wall == pytest.approx(offset, abs=1e-3), t
        assert mono - other_mono == pytest.approx(lead, abs=1e-3), t
        # The other proc's clocks are the simulation's time, at which it read them.
        assert 0 <= t - (other_wall - EPOCH) < 0.01
        assert other_mono - BOOTED == pytest.approx(other_wall - EPOCH, abs=1e-6)


def test_a_clock_jump_moves_no_event_of_the_simulation():
    with_jumps = under(JUMPS, read_clocks)
    without = under(Plan(), read_clocks)
    assert with_jumps.digest == under(JUMPS, read_clocks).digest

    def the_cluster(run: danaus.sim.SimRun) -> list[tuple[str, float, str]]:
        events = [e for e in run.trace.events if not isinstance(e, ev.FAULT_EVENTS)]
        return [(e.kind, e.t, e.proc) for e in events]

    assert the_cluster(with_jumps) == the_cluster(without)
    assert [t for t, _ in with_jumps.value["readings"]] == [t for t, _ in without.value["readings"]]
    assert [e.fault for e in with_jumps.trace.events if isinstance(e, ev.FaultApplied)] == [
        f.describe() for f in JUMPS
    ]


# ---- a slow CPU --------------------------------------------------------------------------

FACTOR = 1001.0
SLOW = Plan((Fault(at=1.0, kind="slow_cpu", target=(1, 0), duration=3.0, amount=FACTOR),))
BURST = 20


def bursts() -> dict[str, list[tuple[float, float]]]:
    """At 0.5, 2 and 5 s, a burst of pings to each proc's actor: when, and how long it took."""
    clocks = hosts().slice(hosts=1).spawn_procs(per_host={"p": 2}).spawn("clocks", Clock)
    clocks.initialized.get()
    slowed = config.current_world().faults.workers("h1")[0]
    took: dict[str, list[tuple[float, float]]] = {"slowed": [], "other": []}

    async def burst(actor: Any) -> float:
        start = now()
        await asyncio.gather(*(actor.ping.call_one() for _ in range(BURST)))
        return now() - start

    for at in (0.5, 2.0, 5.0):
        time.sleep(at - now())
        for p in range(2):
            actor = clocks.slice(p=p)
            proc = actor.read.call_one().get()[0]
            spent = asyncio.run(burst(actor))
            took["slowed" if proc == slowed else "other"].append((at, spent))
    return took


def test_a_slow_cpu_makes_each_message_cost_factor_times_more_one_after_another():
    run = under(SLOW, bursts)
    busy = BURST * (FACTOR - 1) * HANDLING  # one second: the messages queue for the CPU
    slowed, other = run.value["slowed"], run.value["other"]
    assert [at for at, _ in slowed] == [0.5, 2.0, 5.0]
    assert busy <= slowed[1][1] < busy + 0.1
    for at, spent in [slowed[0], slowed[2], *other]:
        assert spent < 0.01, (at, spent)
    assert run.digest == under(SLOW, bursts).digest


# ---- a stopped thread --------------------------------------------------------------------

STOP = 5.0


def one_thread_stops(ticks: str) -> Callable[[], dict[str, Any]]:
    """Two actors on one proc; the thread of the first stops at 1 s for `STOP` seconds while it
    ticks every 0.2 s; the second is called meanwhile."""

    def body() -> dict[str, Any]:
        procs = hosts().slice(hosts=1).spawn_procs()
        first, second = procs.spawn("first", Clock), procs.spawn("second", Clock)
        ticking = getattr(first, ticks).call_one(20, 0.2)
        time.sleep(2.0 - now())
        second.ping.call_one().get()
        answered = now()
        return {"ticks": ticking.get(), "second answered": answered}

    return body


@pytest.mark.parametrize("ticks", ["ticks", "sync_ticks"])
def test_a_stopped_thread_stops_its_actor_only_and_the_proc_stays_up(ticks):
    plan = Plan((Fault(at=1.0, kind="pause_thread", target=(1, 0, 0), duration=STOP),))
    run = under(plan, one_thread_stops(ticks))
    seen = [round(t, 6) for t in run.value["ticks"]]
    gaps = [round(b - a, 6) for a, b in itertools.pairwise(seen)]
    stopped = [gap for gap in gaps if gap > 0.2]
    assert len(stopped) == 1 and STOP <= stopped[0] <= STOP + 0.2, gaps
    assert next(t for t in seen if t > 1.0) >= 1.0 + STOP
    assert 2.0 <= run.value["second answered"] < 2.01  # its neighbour kept working
    lost = [e for e in run.trace.events if isinstance(e, ev.Down) and e.reason != "stopped"]
    assert not lost
    assert run.digest == under(plan, one_thread_stops(ticks)).digest


def test_a_paused_proc_is_lost_where_a_stopped_thread_is_not():
    plan = Plan((Fault(at=1.0, kind="pause", target=(1, 0), duration=STOP),))
    failures: list[Any] = []
    danaus.unhandled_fault_hook = failures.append
    with pytest.raises(SupervisionError, match="stopped answering heartbeats"):
        under(plan, one_thread_stops("ticks"))
    assert failures


# ---- from seeds, and everywhere else -----------------------------------------------------


def test_seeds_draw_each_timing_kind_and_the_simulator_applies_it_the_same_each_time():
    scenario = TimingStorm()
    drawn: dict[str, int] = {}
    for seed in range(40):
        for fault in scenario.plan(seed):
            drawn.setdefault(fault.kind, seed)
    assert set(drawn) == set(TIMING_KINDS)
    for kind, seed in drawn.items():
        outcome = run_scenario(scenario, seed)
        applied = [e.fault for e in outcome.trace.events if isinstance(e, ev.FaultApplied)]
        assert any(f" {kind} " in fault for fault in applied), (kind, seed, outcome.skipped)
        assert not outcome.failed, outcome.violations
        assert run_scenario(scenario, seed).digest == outcome.digest


PLANS_BEFORE_TIMING_KINDS = "9f19480c9900287ae461fb21d25d00c7a45f07fafc9fd1765ced8a331f76572c"
"""The digest of the plans seeds 0 to 1999 drew before the timing kinds were added."""


def test_seeds_of_scenarios_without_timing_kinds_draw_the_plans_they_always_did():
    digest = hashlib.sha256()
    for hosts_ in (1, 3):
        for kinds in (KINDS, KINDS + EXTRA_KINDS):
            for seed in range(2000):
                plan = random_plan(seed, hosts_, 6.0, kinds, 5, (("m", "e"),))
                digest.update(plan.to_json().encode())
    assert digest.hexdigest() == PLANS_BEFORE_TIMING_KINDS


def test_hypothesis_draws_timing_faults():
    for kind in TIMING_KINDS:
        found = find(plans(hosts=2, duration=3.0, kinds=(kind,)), lambda p: len(p) > 0)
        assert found.faults[0].kind == kind


def test_timing_faults_describe_themselves_and_refuse_nonsense():
    assert Fault(at=1, kind="clock_jump", target=(1, 0), duration=2, amount=-30).describe() == (
        "t=1.000s clock_jump proc 0 of host h1 by -30.000s for 2.000s"
    )
    assert Fault(at=1, kind="slow_cpu", target=(0, 2), duration=1, amount=8).describe() == (
        "t=1.000s slow_cpu proc 2 of host h0 8x slower for 1.000s"
    )
    assert Fault(at=0, kind="pause_thread", target=(2, 1, 3), duration=1).describe() == (
        "t=0.000s pause_thread actor 3 of proc 1 of host h2 for 1.000s"
    )
    with pytest.raises(ValueError, match="factor"):
        Fault(at=0, kind="slow_cpu", target=(0, 0), amount=0.5)
    with pytest.raises(ValueError, match="host, proc slot, actor slot"):
        Fault(at=0, kind="pause_thread", target=(0, 0))
    plan = Plan((Fault(at=1, kind="slow_cpu", target=(0, 2), duration=1, amount=8),))
    assert Plan.from_json(plan.to_json()) == plan


def test_real_transports_refuse_timing_faults_and_say_why():
    danaus.configure(transport="tcp")
    try:
        world = config.current_world()
        assert applicable_kinds(KINDS + TIMING_KINDS, world) == ["crash", "crash_host", "pause"]
        faults = world.faults
        for apply, why in [
            (lambda: faults.clock_jump("p", 1.0), "CAP_SYS_TIME"),
            (lambda: faults.slow_cpu("p", 2.0), "cpu.max"),
            (lambda: faults.pause_thread("p", 0), "stops the whole process"),
        ]:
            with pytest.raises(FaultUnsupported, match=why):
                apply()
    finally:
        danaus.shutdown()
