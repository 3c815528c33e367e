"""A run's state belongs to its world: worlds made one after another share nothing."""

from __future__ import annotations

import gc
import random

import danaus
import danaus.sim
from danaus import Actor, MeshFailure, endpoint, this_host
from danaus.chaos import Plan, run_scenario
from danaus.core import config
from danaus.transports.sim.collector import MIDDLE_THRESHOLD, YOUNG_THRESHOLD
from tests.chaos.scenarios import Calm
from tests.conformance.transports import FAST_HEARTBEATS


class Fails(Actor):
    def __init__(self) -> None:
        raise RuntimeError("no")

    @endpoint
    def ping(self) -> int:
        return 1


def spawn_a_failure_and_stop() -> None:
    procs = this_host().spawn_procs({"w": 1})
    procs.spawn("fails", Fails).initialized.exception(timeout=30)
    procs.stop().get(timeout=30)


def test_a_sim_run_then_a_tcp_run_share_no_state():
    seen: list[str] = []
    danaus.unhandled_fault_hook = lambda failure: seen.append(failure.mesh_name)
    before = random.getstate()

    sim = danaus.sim.run(spawn_a_failure_and_stop, seed=3)
    assert random.getstate() == before, "the simulator gave back the global random state"
    assert config.installed() is None
    assert seen == ["fails"]

    danaus.configure(transport="tcp", **FAST_HEARTBEATS)
    try:
        world = config.current_world()
        assert world.sites is None and world.fault_hook is None
        assert world.trace is not sim.trace and not world.trace.enabled
        spawn_a_failure_and_stop()
    finally:
        danaus.shutdown()
    assert seen == ["fails", "fails"]


def test_a_sim_run_gives_back_the_collector_thresholds():
    before = gc.get_threshold()
    run = danaus.sim.run(gc.get_threshold)
    assert run.value[0] >= YOUNG_THRESHOLD, "young collections are rarer while a world runs"
    assert run.value[1] >= MIDDLE_THRESHOLD, "and collections of the middle generation too"
    assert run.value[2:] == before[2:]
    assert gc.get_threshold() == before


def test_a_chaos_run_leaves_nothing_behind_for_a_plain_run():
    seen: list[MeshFailure] = []

    def hook(failure: MeshFailure) -> None:
        seen.append(failure)

    danaus.unhandled_fault_hook = hook
    choice = config.selected()
    outcome = run_scenario(Calm(), 5, Plan.from_json('[{"at":0.5,"kind":"crash","target":[0,1]}]'))
    assert outcome.violations == []
    assert danaus.unhandled_fault_hook is hook, "the chaos run kept its hook to itself"
    assert config.selected() == choice and config.installed() is None

    def main() -> bool:
        world = config.current_world()
        spawn_a_failure_and_stop()
        return world.sites is None and world.fault_hook is None

    assert danaus.sim.run(main, seed=5).value
    assert [f.mesh_name for f in seen] == ["fails"]


def test_a_chaos_run_on_tcp_does_not_change_the_choice_of_transport():
    previous = config.selected()
    danaus.configure(transport="sim")
    try:
        run_scenario(Calm(), 0, Plan(), transport="tcp", **FAST_HEARTBEATS)
        assert config.selected() == "sim"
        assert config.current_world().name == "sim"
    finally:
        danaus.shutdown()
        danaus.configure(transport=previous)
