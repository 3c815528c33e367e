"""Failures only the verbs transport has, on real processes over the emulated device."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

import danaus
from danaus import Actor, ActorError, SupervisionError, endpoint, this_host
from danaus.core import config
from danaus.core.transport import ROOT
from danaus.rdma import RDMABuffer, RDMAError
from tests.conformance.test_supervision import record_root_failures
from tests.tcp.conftest import process_state, wait_until


@pytest.fixture
def verbs(monkeypatch) -> Iterator[Callable[..., None]]:
    """Configure verbs on the emulated device; ``environment`` goes to every proc."""

    def start(environment: dict[str, str] | None = None, **options: object) -> None:
        monkeypatch.setenv("DANAUS_VERBS_PROVIDER", "emulated")
        for name, value in (environment or {}).items():
            monkeypatch.setenv(name, value)
        danaus.configure(transport="verbs", heartbeat_interval=0.2, **options)

    try:
        yield start
    finally:
        danaus.shutdown()


def transport():
    return config.installed().transport


class Peer(Actor):
    def __init__(self) -> None:
        self.memory: dict[str, np.ndarray] = {}
        self.buffers: dict[str, RDMABuffer] = {}

    @endpoint
    def ping(self) -> int:
        return os.getpid()

    @endpoint
    def break_queue_pair_with(self, peer: str) -> str:
        """Move this proc's message queue pair with ``peer`` to ERR, as a device fault would."""
        plane = transport().data
        channel = plane._peers[peer].messages
        transport().io.call_soon(channel.qp.to_error)
        return "broken"

    @endpoint
    def share(self, name: str, size: int) -> RDMABuffer:
        self.memory[name] = np.arange(size, dtype=np.int64).astype(np.uint8)
        self.buffers[name] = RDMABuffer(self.memory[name])
        return self.buffers[name]

    @endpoint
    def drop(self, name: str) -> None:
        self.buffers.pop(name).drop().get()

    @endpoint
    def read(self, buffer: RDMABuffer) -> tuple[int, int]:
        """Read ``buffer`` twice into the same memory; the regions registered for it."""
        out = np.zeros(buffer.size(), dtype=np.uint8)
        registrations = transport().data.registrations
        before = registrations.registered
        buffer.read_into(out).get(timeout=60)
        buffer.read_into(out).get(timeout=60)
        return int(out.sum()), registrations.registered - before

    @endpoint
    def call_peer(self, peer: Peer) -> int:
        return peer.ping.call_one().get(timeout=60)


def all_threads_stopped(pid: int) -> bool:
    """Whether every thread of ``pid`` has stopped: a SIGSTOP stops each thread as it next
    leaves the kernel, and a running one (a NIC answering a packet) may still act meanwhile."""
    tasks = Path(f"/proc/{pid}/task").iterdir()
    return all(process_state(int(task.name)) in ("T", "t", None) for task in tasks)


def two_peers() -> Peer:
    peers = this_host().spawn_procs({"w": 2}).spawn("peers", Peer)
    peers.ping.call().get(timeout=60)
    return peers


def test_a_queue_pair_in_error_is_a_lost_peer(verbs):
    verbs()
    failures = record_root_failures()
    peers = two_peers()
    with pytest.raises(SupervisionError, match="queue pair with the controller"):
        peers.slice(w=1).break_queue_pair_with.call_one(ROOT).get(timeout=60)
    failure = failures.recv().get(timeout=60)
    assert dict(failure.rank) == {"w": 1}
    assert "lost its queue pair with the controller" in failure.cause
    assert "WR_FLUSH_ERR" in failure.cause
    assert peers.slice(w=0).ping.call_one().get(timeout=60) > 0


def test_a_queue_pair_whose_peer_stops_answering_exceeds_its_retries(verbs):
    """A paused proc's emulated NIC stops too: requests to it exceed their retries long before
    heartbeats (30 s) would notice."""
    verbs({"DANAUS_VERBS_TIMEOUT": "14", "DANAUS_VERBS_RETRY_COUNT": "3"}, heartbeat_timeout=30)
    failures = record_root_failures()
    peers = two_peers()
    pid = peers.slice(w=1).ping.call_one().get(timeout=60)
    os.kill(pid, signal.SIGSTOP)
    try:
        wait_until(lambda: all_threads_stopped(pid), 30, f"proc {pid} to stop")
        with pytest.raises(SupervisionError, match="RETRY_EXC_ERR"):
            peers.slice(w=1).ping.call_one().get(timeout=60)
        failure = failures.recv().get(timeout=60)
    finally:
        with contextlib.suppress(ProcessLookupError):  # a lost proc is killed, maybe already
            os.kill(pid, signal.SIGCONT)
    assert dict(failure.rank) == {"w": 1}
    assert "unreachable over its queue pair from root" in failure.cause
    assert "heartbeats" not in failure.cause
    assert peers.slice(w=0).ping.call_one().get(timeout=60) > 0


def test_a_remote_access_error_is_an_rdma_error_naming_the_buffer(verbs):
    verbs()
    peers = two_peers()
    owner, reader = peers.slice(w=0), peers.slice(w=1)
    kept = owner.share.call_one("kept", 1000).get(timeout=60)
    dropped = owner.share.call_one("dropped", 1000).get(timeout=60)
    owner.drop.call_one("dropped").get(timeout=60)
    with pytest.raises(RDMAError) as raised:
        dropped.read_into(np.zeros(1000, dtype=np.uint8)).get(timeout=60)
    message = str(raised.value)
    assert "the RDMABuffer of 1000 bytes registered by" in message
    assert f"(key {dropped._handle.key})" in message and "remote access error" in message
    assert raised.value.handle == dropped._handle
    beyond = RDMABuffer._from_handle(dataclasses.replace(kept._handle, size=4000))
    with pytest.raises(RDMAError, match="4000 bytes"):
        beyond.read_into(np.zeros(4000, dtype=np.uint8)).get(timeout=60)
    out = np.zeros(1000, dtype=np.uint8)
    kept.read_into(out).get(timeout=60)
    assert int(out.sum()) == int(np.arange(1000, dtype=np.int64).astype(np.uint8).sum())
    assert reader.read.call_one(kept).get(timeout=60)[0] == int(out.sum())
    with pytest.raises(ActorError) as remote:
        reader.read.call_one(dropped).get(timeout=60)
    assert isinstance(remote.value.exception, RDMAError)
    assert remote.value.exception.handle == dropped._handle


def test_reading_into_the_same_memory_again_registers_nothing_new(verbs):
    verbs()
    peers = two_peers()
    buffer = peers.slice(w=0).share.call_one("b", 1 << 20).get(timeout=60)
    total, registered = peers.slice(w=1).read.call_one(buffer).get(timeout=60)
    assert total == int(np.arange(1 << 20, dtype=np.int64).astype(np.uint8).sum())
    assert registered == 1


def test_a_peer_that_dies_is_lost_to_its_callers_and_the_others_go_on(verbs):
    verbs()
    failures = record_root_failures()
    peers = two_peers()
    caller, target = peers.slice(w=0), peers.slice(w=1)
    assert caller.call_peer.call_one(target).get(timeout=60) > 0
    os.kill(target.ping.call_one().get(timeout=60), signal.SIGKILL)
    with pytest.raises(Exception, match=r"Killed\(sig=9\)"):
        caller.call_peer.call_one(target).get(timeout=60)
    assert dict(failures.recv().get(timeout=60).rank) == {"w": 1}
    assert caller.ping.call_one().get(timeout=60) > 0
