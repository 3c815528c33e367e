"""Failures only a real process can have."""

from __future__ import annotations

import ctypes
import os
import signal

import pytest

from danaus import Actor, SupervisionError, context, endpoint, this_host
from tests.conformance.test_supervision import record_root_failures
from tests.tcp.conftest import run_script, wait_until


class Crasher(Actor):
    @endpoint
    def segfault(self) -> None:
        ctypes.string_at(0)

    @endpoint
    def hard_exit(self, code: int) -> None:
        os._exit(code)

    @endpoint
    def ping(self) -> str:
        return "pong"


class Closer(Crasher):
    @endpoint
    def close_connections_from(self, peer: str) -> None:
        """Close this proc's data connections from ``peer``, as it closes one on which a peer
        sent what breaks the protocol."""
        plane = context().actor_instance.runtime.transport.data
        plane.call_on_loop(lambda: plane._close_inbound_from(peer))


def test_a_data_connection_that_breaks_between_live_procs_ends_with_one_declared_lost(tcp):
    """Never half-open: the controller's next call finds the connection broken, and the proc
    at its other end is declared lost, which its caller and its owner are told."""
    tcp()
    failures = record_root_failures()
    closers = this_host().spawn_procs({"w": 2}).spawn("c", Closer)
    closers.slice(w=0).close_connections_from.call_one("root").get(timeout=30)
    with pytest.raises(SupervisionError, match="unreachable over its data connection from root"):
        for _ in range(100):  # the first writes may still reach the socket's buffer
            closers.slice(w=0).ping.call_one().get(timeout=30)
    failure = failures.recv().get(timeout=30)
    assert dict(failure.rank) == {"w": 0}
    assert "its connection broke" in failure.cause
    assert closers.slice(w=1).ping.call_one().get(timeout=30) == "pong"


def test_segfault_is_a_supervised_failure(tcp):
    tcp()
    failures = record_root_failures()
    crashers = this_host().spawn_procs({"w": 2}).spawn("c", Crasher)
    with pytest.raises(SupervisionError, match=r"Killed\(sig=11\)"):
        crashers.slice(w=0).segfault.call_one().get(timeout=30)
    failure = failures.recv().get(timeout=30)
    assert failure.signal == signal.SIGSEGV
    assert dict(failure.rank) == {"w": 0}
    assert failure.pid is not None
    assert crashers.slice(w=1).ping.call_one().get(timeout=30) == "pong"


def test_os_exit_ends_only_that_process(tcp):
    """``os._exit`` skips Python's exit handling; the launcher still sees the exit code."""
    tcp()
    failures = record_root_failures()
    crashers = this_host().spawn_procs({"w": 2}).spawn("c", Crasher)
    with pytest.raises(SupervisionError, match=r"Exited\(code=7\)"):
        crashers.slice(w=0).hard_exit.call_one(7).get(timeout=30)
    failure = failures.recv().get(timeout=30)
    assert failure.exit_code == 7
    assert crashers.slice(w=1).ping.call_one().get(timeout=30) == "pong"


def test_a_crash_asked_for_while_procs_start_happens_once_they_run(tcp):
    """A fault injected before its proc has registered waits for it instead of vanishing."""
    world = tcp()
    failures = record_root_failures()
    crashers = this_host().spawn_procs({"w": 2}).spawn("c", Crasher)
    host = world.hosts()[0]
    wait_until(lambda: len(world.faults.workers(host)) == 2, 30, "the procs to be started")
    doomed = world.faults.workers(host)[0]
    world.faults.crash(doomed)
    failure = failures.recv().get(timeout=30)
    assert (failure.proc, failure.signal, dict(failure.rank)) == (doomed, signal.SIGKILL, {"w": 0})
    assert crashers.slice(w=1).ping.call_one().get(timeout=30) == "pong"


CRASHING_CONTROLLER = """
import ctypes
import danaus
from danaus import Actor, SupervisionError, endpoint, this_host

class Crasher(Actor):
    @endpoint
    def crash_in_native_code(self):
        ctypes.string_at(0)

danaus.unhandled_fault_hook = lambda failure: None
crasher = this_host().spawn_procs({"w": 1}).spawn("c", Crasher)
try:
    crasher.crash_in_native_code.call_one().get(timeout=30)
except SupervisionError:
    print("supervised")
"""


def test_a_proc_killed_by_a_crash_tells_the_controller_where(tmp_path):
    done = run_script(CRASHING_CONTROLLER, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "supervised" in done.stdout
    assert "Segmentation fault" in done.stderr, done.stderr[-3000:]
    assert "crash_in_native_code" in done.stderr, done.stderr[-3000:]
