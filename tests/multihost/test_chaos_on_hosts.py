"""Chaos on real hosts: partitions, isolated and crashed hosts of the namespace cluster.

The faults go through the world's `Faults`, given power over the cluster's
machines (`tests.cluster.NamespaceControl`): what the chaos runner and the
nemesis do, here by hand, then by a scenario of the chaos tutorial.
"""

from __future__ import annotations

import importlib.util
import re
import time

import pytest
from kvstore import BuggyKV, KVStore

import danaus
from danaus import Actor, MeshFailure, endpoint, hosts
from danaus.chaos import Fault, FaultUnsupported, Plan, run_scenario
from danaus.core import trace as ev
from danaus.core.config import current_world
from tests.cluster import Cluster, NamespaceControl
from tests.multihost.conftest import DETECTED, FAST
from tests.tcp.conftest import wait_until

pytestmark = pytest.mark.multihost

@pytest.fixture(params=["tcp", "ucx"])
def transport(request: pytest.FixtureRequest) -> str:
    if request.param == "ucx" and importlib.util.find_spec("ucxx") is None:
        pytest.skip("the ucx transport needs the ucxx package")
    return request.param


class Member(Actor):
    @endpoint
    def where(self) -> dict[str, int]:
        return dict(danaus.context().actor_instance.rank)

    @endpoint
    async def ask(self, other: Actor) -> dict[str, int]:
        return await other.where.call_one()


def start_job(cluster: Cluster, control: NamespaceControl, transport: str = "tcp") -> Actor:
    danaus.configure(
        transport=transport, **cluster.controller_options(), host_control=control, **FAST
    )
    members = hosts().spawn_procs(per_host={"gpus": 2}).spawn("members", Member)
    members.where.call().get(timeout=120)
    return members


def collect_failures() -> list[MeshFailure]:
    failures: list[MeshFailure] = []
    danaus.unhandled_fault_hook = failures.append
    return failures


def lost_with_their_host(
    failures: list[MeshFailure], cluster: Cluster, host: int, since: float
) -> list[MeshFailure]:
    """The two procs of ``host``, reported lost within `DETECTED` of ``since``, naming it."""
    wait_until(lambda: len(failures) >= 2, 60, "the loss of both procs of the host")
    assert time.monotonic() - since < DETECTED
    lost = sorted(failures, key=lambda f: f.rank["gpus"])
    assert [dict(f.rank) for f in lost] == [{"hosts": host, "gpus": 0}, {"hosts": host, "gpus": 1}]
    name = cluster.hosts[host].name
    assert all(f.host == name for f in lost)
    assert all(f"lost with its host {name}" in f.cause for f in lost), lost[0].cause
    assert all("heartbeats" in f.cause for f in lost), lost[0].cause
    return lost


def test_a_crashed_host_is_the_loss_of_every_proc_on_it(namespace_cluster, host_control, transport):
    members = start_job(namespace_cluster, host_control, transport)
    failures = collect_failures()
    world = current_world()
    assert world.faults.network_faults == {"clog", "partition", "isolate"}
    since = time.monotonic()
    world.faults.crash_host(world.hosts()[1])
    assert not namespace_cluster.job_pids(namespace_cluster.hosts[1])
    lost_with_their_host(failures, namespace_cluster, 1, since)
    survivors = members.slice(hosts=slice(0, 3, 2)).where.call().get(timeout=60)
    assert len(survivors) == 4


def test_an_isolated_host_is_lost_and_the_others_work_on(namespace_cluster, host_control):
    members = start_job(namespace_cluster, host_control)
    failures = collect_failures()
    world = current_world()
    since = time.monotonic()
    heal = world.faults.isolate(world.hosts()[2])
    assert host_control.cuts() == 6  # to and from the two other hosts and the controller
    lost_with_their_host(failures, namespace_cluster, 2, since)
    heal()
    assert host_control.cuts() == 0
    survivors = members.slice(hosts=slice(0, 2)).where.call().get(timeout=60)
    assert len(survivors) == 4
    # cut off from its controller, the host agent ends the job there by itself
    isolated = namespace_cluster.hosts[2]
    wait_until(lambda: namespace_cluster.clean(isolated), 60, "the isolated host to be clean")


def test_a_partition_between_two_hosts_delays_calls_across_it_and_loses_nothing(
    namespace_cluster, host_control
):
    """Both hosts still reach the controller: nobody is lost, and calls across wait, then finish."""
    members = start_job(namespace_cluster, host_control)
    failures = collect_failures()
    world = current_world()
    heal = world.faults.partition([world.hosts()[1]], [world.hosts()[2]], one_way=False)
    asked = members.slice(hosts=1, gpus=0).ask.call_one(members.slice(hosts=2, gpus=0))
    others = members.slice(gpus=1)
    deadline = time.monotonic() + 2 * FAST["heartbeat_timeout"]
    while time.monotonic() < deadline:  # longer than the heartbeat timeout, all answering
        assert len(others.where.call().get(timeout=30)) == 3
    assert not asked.done()
    heal()
    assert asked.get(timeout=60) == {"hosts": 2, "gpus": 0}
    assert failures == []


def test_without_control_of_the_machines_network_faults_are_refused(namespace_cluster):
    danaus.configure(transport="tcp", **namespace_cluster.controller_options(), **FAST)
    try:
        world = current_world()
        assert world.faults.network_faults == frozenset()
        with pytest.raises(FaultUnsupported, match=re.escape("configure(host_control=...)")):
            world.faults.partition([world.hosts()[1]], [world.hosts()[2]], one_way=False)
        with pytest.raises(FaultUnsupported, match=re.escape("configure(host_control=...)")):
            world.faults.isolate(world.hosts()[1])
    finally:
        danaus.shutdown()


STORM = Plan(
    (
        Fault(at=1.0, kind="partition", target=(2,), duration=1.0),
        Fault(at=3.0, kind="crash_host", target=(1,)),
    )
)
"""The backup's host cut off for a moment, then the primary's host dies."""


def test_the_store_keeps_acknowledged_writes_through_a_partition_and_a_host_crash(
    namespace_cluster, host_control
):
    options = {**namespace_cluster.controller_options(), "host_control": host_control, **FAST}
    outcome = run_scenario(KVStore(), 0, STORM, transport="tcp", **options)
    assert outcome.violations == []
    assert outcome.skipped == []
    applied = [e.fault for e in outcome.checked if isinstance(e, ev.FaultApplied)]
    assert [a.split()[1] for a in applied] == ["partition", "crash_host"]
    assert next(outcome.history.of("failover"), None) is not None
    failed = [op for op in outcome.history.operations() if op["status"] != "ok"]
    assert len(outcome.value) >= KVStore.writes - len(failed)


class ForgetfulKV(BuggyKV):
    """Acknowledges writes and never copies them: any crash of the primary loses some."""

    flush_every = 600.0


def test_the_checkers_catch_writes_lost_with_a_crashed_host(namespace_cluster, host_control):
    options = {**namespace_cluster.controller_options(), "host_control": host_control, **FAST}
    outcome = run_scenario(ForgetfulKV(), 0, STORM, transport="tcp", **options)
    assert outcome.violations
    assert {v.checker for v in outcome.violations} == {"invariant"}
    assert all("acknowledged write" in v.message for v in outcome.violations)
