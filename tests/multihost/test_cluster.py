"""A job on three hosts: network namespaces on a private subnet, a ``danaus worker`` in each.

The controller is this test process (or a script, where the test kills it),
in the root namespace; see ``tests/cluster.py``. Tests that break a host (kill
its agent or its worker, pull its cable) mend it before they end, for the
tests after them.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

import danaus
from danaus import Actor, Channel, MeshFailure, context, endpoint, hosts
from danaus.core import config
from danaus.rdma import RDMABuffer
from tests.cluster import Cluster
from tests.multihost.conftest import DETECTED, FAST, ROOT
from tests.multihost.lost_hosts import LOST, VICTIM, stop_losing_a_host
from tests.tcp.conftest import wait_until
from tests.tcp.test_fork_server import Process
from tests.ucx.probe import Probe

pytestmark = pytest.mark.multihost

TRANSPORTS = ["tcp", "ucx"]


@pytest.fixture(params=TRANSPORTS)
def transport(request: pytest.FixtureRequest) -> str:
    if request.param == "ucx" and importlib.util.find_spec("ucxx") is None:
        pytest.skip("the ucx transport needs the ucxx package")
    return request.param


@pytest.fixture
def job(namespace_cluster: Cluster, transport: str) -> Iterator[Cluster]:
    """This process as the controller of a job on the cluster's three hosts."""
    danaus.configure(transport=transport, **namespace_cluster.controller_options(), **FAST)
    try:
        yield namespace_cluster
    finally:
        danaus.shutdown()


class Member(Actor):
    """Knows where it runs; passes a token to the next member, on the next host."""

    def __init__(self) -> None:
        self.rank = dict(context().actor_instance.rank)
        self.buffer = RDMABuffer(memoryview(bytearray(f"held by {self.rank}".encode())))

    @endpoint
    def where(self) -> tuple[dict[str, int], int, int]:
        return self.rank, os.getpid(), os.getppid()

    @endpoint
    def pass_on(self, ring: Actor, hops: int) -> list[dict[str, int]]:
        here = [self.rank]
        if hops == 0:
            return here
        following = (self.rank["hosts"] + 1) % 3
        return here + ring.slice(hosts=following).pass_on.call_one(ring, hops - 1).get()

    @endpoint
    def memory(self) -> RDMABuffer:
        return self.buffer

    @endpoint
    def read(self, buffer: RDMABuffer) -> bytes:
        into = bytearray(buffer.size())
        buffer.read_into(memoryview(into)).get()
        return bytes(into)


def run_controller(
    args: list[str], cluster: Any, transport: str
) -> subprocess.CompletedProcess[str]:
    """Run a controller program in a fresh interpreter, attached to ``cluster``'s workers."""
    return subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        env={**os.environ, "DANAUS_TRANSPORT": transport, **cluster.controller_environment()},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_getting_started_runs_on_three_hosts(namespace_cluster, transport):
    """The example, unchanged, with the job's workers named in its environment."""
    result = run_controller(
        [str(ROOT / "examples" / "getting_started.py")], namespace_cluster, transport
    )
    assert result.returncode == 0, result.stderr
    assert "mesh sizes {'hosts': 3, 'gpus': 8}" in result.stdout
    assert "spawned 24 trainers" in result.stdout


def test_actors_on_different_hosts_call_each_other_and_read_each_others_memory(job):
    ring = hosts().spawn_procs().spawn("ring", Member)
    places = list(ring.where.call().get(timeout=120).values())
    assert [rank for rank, _, _ in places] == [{"hosts": 0}, {"hosts": 1}, {"hosts": 2}]
    visited = ring.slice(hosts=0).pass_on.call_one(ring, 2).get(timeout=120)
    assert [stop["hosts"] for stop in visited] == [0, 1, 2]
    far = ring.slice(hosts=2).memory.call_one().get(timeout=120)
    assert ring.slice(hosts=0).read.call_one(far).get(timeout=120) == b"held by {'hosts': 2}"


class Bulk(Probe):
    """A probe that also sends large messages."""

    @endpoint
    def send_large(self, to: Actor, count: int) -> list[int]:
        return [to.take.call_one(bytes(1 << 20)).get(timeout=120) for _ in range(count)]


def test_without_rdma_ucx_keeps_large_messages_between_hosts_on_tcp(namespace_cluster):
    """Namespaces have no RDMA device: UCX would only be TCP, slower than the stream plane."""
    if importlib.util.find_spec("ucxx") is None:
        pytest.skip("the ucx transport needs the ucxx package")
    danaus.configure(transport="ucx", **namespace_cluster.controller_options(), **FAST)
    try:
        bulk = hosts().slice(hosts=slice(0, 2)).spawn_procs().spawn("bulk", Bulk)
        sizes = bulk.slice(hosts=0).send_large.call_one(bulk.slice(hosts=1), 3).get(timeout=120)
        assert sizes == [1 << 20] * 3
        assert list(bulk.ucx_started.call().get(timeout=120).values()) == [False, False]
    finally:
        danaus.shutdown()


class PollingProcess(Process):
    @endpoint
    def spin(self) -> float:
        return config.current_world().waits.spin  # type: ignore[attr-defined,no-any-return]


def test_every_host_takes_the_jobs_preload_and_spin(namespace_cluster, transport):
    """Each host's fork server preloads the job's modules; each proc polls for the job's spin."""
    options = {**namespace_cluster.controller_options(), **FAST, "wait_spin_us": 750}
    danaus.configure(transport=transport, preload=["tests.tcp.preloaded"], **options)
    try:
        procs = hosts().spawn_procs(per_host={"gpus": 2}).spawn("p", PollingProcess)
        importers = procs.importer.call("tests.tcp.preloaded").get(timeout=120).values()
        answers = list(zip(importers, procs.parent.call().get(timeout=120).values()))
        spins = set(procs.spin.call().get(timeout=120).values())
    finally:
        danaus.shutdown()
    assert all(importer == server for importer, server in answers), answers
    assert len({server for _, server in answers}) == 3, "one fork server per host"
    assert spins == {750 / 1e6}


def start_members(per_host: int) -> tuple[Actor, list[tuple[dict[str, int], int, int]]]:
    members = hosts().spawn_procs(per_host={"gpus": per_host}).spawn("members", Member)
    return members, list(members.where.call().get(timeout=120).values())


def losses_of(failures: object, count: int) -> list[MeshFailure]:
    return sorted(
        (failures.recv().get(timeout=60) for _ in range(count)),  # type: ignore[attr-defined]
        key=lambda f: f.rank["gpus"],
    )


@pytest.mark.parametrize("what", ["host agent", "worker"])
def test_a_killed_agent_is_the_loss_of_every_proc_on_its_host(job, what):
    port, failures = Channel.open()
    danaus.unhandled_fault_hook = port.send
    members, places = start_members(per_host=2)
    victim = job.hosts[1]
    agent = places[2][2]
    assert places[3][2] == agent, "both procs of a host are children of its agent"
    assert victim.worker is not None
    try:
        since = time.monotonic()
        os.kill(victim.worker.pid if what == "worker" else agent, signal.SIGKILL)
        lost = losses_of(failures, 2)
        assert time.monotonic() - since < DETECTED
        assert [dict(f.rank) for f in lost] == [{"hosts": 1, "gpus": 0}, {"hosts": 1, "gpus": 1}]
        assert all(f.host == victim.name for f in lost)
        survivors = members.slice(hosts=slice(0, 3, 2)).where.call().get(timeout=60)
        assert len(survivors) == 4
        if what == "worker":
            wait_until(lambda: not job.pids_in(victim), 60, "every process of the host to end")
    finally:
        if what == "worker":
            job.stop_worker(victim)
            job.start_worker(victim)
    wait_until(lambda: job.clean(victim), 60, f"{victim.name} to be clean")


def test_a_host_whose_link_goes_down_is_lost_with_every_proc_on_it(job):
    port, failures = Channel.open()
    danaus.unhandled_fault_hook = port.send
    members, _ = start_members(per_host=2)
    victim = job.hosts[2]
    since = time.monotonic()
    job.link(victim, up=False)
    try:
        lost = losses_of(failures, 2)
        assert time.monotonic() - since < DETECTED
        assert [dict(f.rank) for f in lost] == [{"hosts": 2, "gpus": 0}, {"hosts": 2, "gpus": 1}]
        assert all(f.host == victim.name for f in lost)
        assert any(f"lost with its host {victim.name}" in f.cause for f in lost)
        survivors = members.slice(hosts=slice(0, 2)).where.call().get(timeout=60)
        assert len(survivors) == 4
    finally:
        job.link(victim, up=True)
    wait_until(lambda: job.clean(victim), 60, f"{victim.name} to be clean")


def test_output_and_logs_of_every_host_reach_the_controller_named_by_host_and_rank(
    namespace_cluster, transport
):
    result = run_controller(["-c", TALK.format(root=ROOT)], namespace_cluster, transport)
    assert result.returncode == 0, result.stderr
    for index, host in enumerate(namespace_cluster.hosts):
        for gpu in range(2):
            prefix = f"[{host.name} talkers hosts={index} gpus={gpu}]"
            assert f"{prefix} printed\n" in result.stdout
            assert f"{prefix} printed to stderr\n" in result.stderr
            actor = f"<root>.<{__name__}.Talker talkers{{'hosts': {index}/3, 'gpus': {gpu}/2}}>"
            assert f"{prefix} WARNING talk: [actor={actor}] logged\n" in result.stderr


class Talker(Actor):
    @endpoint
    def talk(self) -> None:
        print("printed", flush=True)
        print("printed to stderr", file=sys.stderr, flush=True)
        logging.getLogger("talk").warning("logged")


TALK = """
import sys
sys.path.insert(0, "{root}")
import danaus
from tests.multihost.test_cluster import Talker
talkers = danaus.hosts().spawn_procs(per_host={{"gpus": 2}}).spawn("talkers", Talker)
talkers.talk.call().get(timeout=120)
danaus.shutdown()
"""


def test_a_vanished_controller_leaves_only_the_workers(namespace_cluster, transport, tmp_path):
    script = tmp_path / "vanish.py"
    script.write_text(VANISH)
    controller = subprocess.Popen(
        [sys.executable, str(script)],
        cwd=ROOT,
        env={
            **os.environ,
            "DANAUS_TRANSPORT": transport,
            **namespace_cluster.controller_environment(),
        },
        stdout=subprocess.PIPE,
        text=True,
    )
    assert controller.stdout is not None
    assert controller.stdout.readline().strip() == "6 procs up"
    assert not any(namespace_cluster.clean(h) for h in namespace_cluster.hosts)
    controller.kill()
    controller.wait()
    for host in namespace_cluster.hosts:
        wait_until(
            lambda h=host: namespace_cluster.clean(h),
            60,
            f"{host.name} to be clean",
        )


VANISH = """
import time
import danaus
danaus.configure(heartbeat_interval=0.3, heartbeat_timeout=3.0)
procs = danaus.hosts().spawn_procs(per_host={"gpus": 2})
procs.initialized.get(timeout=120)
print("6 procs up", flush=True)
time.sleep(600)
"""


@pytest.mark.parametrize("when", ["before", "during"])
def test_a_stop_skips_a_crashed_host_and_the_controllers_exit_leaves_the_others_waiting(
    job, host_control, when
):
    victim = job.hosts[VICTIM]
    mesh = hosts()
    outcome = stop_losing_a_host(mesh, mesh.stop, lambda: host_control.crash(victim.address), when)
    assert outcome.lost == LOST
    assert len(outcome.failures) == (2 if when == "before" else 0)
    danaus.shutdown()
    for host in (job.hosts[0], job.hosts[2]):
        wait_until(lambda h=host: job.clean(h), 60, f"{host.name} to wait, with nothing of the job")
