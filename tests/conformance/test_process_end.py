"""An actor that ends its own process: its proc alone ends, reported as the OS saw it end."""

from __future__ import annotations

import os
import signal

import pytest

from danaus import Actor, SupervisionError, endpoint, this_host
from tests.conformance.test_supervision import assert_no_more, record_root_failures


class Ender(Actor):
    """Ends its process in one of the ways a program does."""

    @endpoint
    def exit(self, code: int) -> None:
        os._exit(code)

    @endpoint
    async def exit_async(self, code: int) -> None:
        os._exit(code)

    @endpoint
    def kill(self, sig: int) -> str:
        os.kill(os.getpid(), sig)
        return "still running"

    @endpoint
    async def kill_async(self, sig: int) -> str:
        os.kill(os.getpid(), sig)
        return "still running"

    @endpoint
    def ping(self) -> str:
        return "pong"


ENDINGS = [
    ("exit", 3, "Exited(code=3)"),
    ("exit_async", 4, "Exited(code=4)"),
    ("kill", signal.SIGKILL, "Killed(sig=9)"),
    ("kill_async", signal.SIGTERM, "Killed(sig=15)"),
    ("kill", signal.SIGSEGV, "Killed(sig=11)"),
]


def test_an_actor_that_ends_its_process_ends_its_proc_alone(run):
    """On a real transport, the answer to a call that signals its own process may still
    leave before the process ends: so the endings are broadcast, and what counts is
    how the proc's end is reported, and that later calls fail."""

    def main():
        failures = record_root_failures()
        enders = this_host().spawn_procs({"w": len(ENDINGS) + 1}).spawn("enders", Ender)
        enders.initialized.get(timeout=30)
        for rank, (how, arg, _) in enumerate(ENDINGS):
            getattr(enders.slice(w=rank), how).broadcast(int(arg))
        reported = {}
        for _ in ENDINGS:
            failure = failures.recv().get(timeout=30)
            reported[dict(failure.rank)["w"]] = failure
        later = []
        for rank in range(len(ENDINGS)):
            with pytest.raises(SupervisionError) as raised:
                enders.slice(w=rank).ping.call_one().get(timeout=30)
            later.append(str(raised.value))
        survivor = enders.slice(w=len(ENDINGS)).ping.call_one().get(timeout=30)
        assert_no_more(failures)
        return reported, later, survivor

    reported, later, survivor = run(main)
    assert survivor == "pong"
    for rank, (_, arg, cause) in enumerate(ENDINGS):
        assert cause in reported[rank].cause
        assert cause in later[rank]
        if cause.startswith("Exited"):
            assert (reported[rank].exit_code, reported[rank].signal) == (arg, None)
        else:
            assert (reported[rank].exit_code, reported[rank].signal) == (None, arg)


@pytest.mark.parametrize("sig", [0, signal.SIGCHLD, signal.SIGURG, signal.SIGWINCH, signal.SIGPIPE])
def test_a_signal_that_does_not_end_a_process_leaves_its_proc_running(run, sig):
    def main():
        failures = record_root_failures()
        enders = this_host().spawn_procs({"w": 1}).spawn("enders", Ender)
        answers = [enders.kill.call_one(int(sig)).get(timeout=30)]
        answers.append(enders.kill_async.call_one(int(sig)).get(timeout=30))
        answers.append(enders.ping.call_one().get(timeout=30))
        assert_no_more(failures)
        return answers

    assert run(main) == ["still running", "still running", "pong"]


def test_an_actor_that_stops_its_process_is_declared_lost_by_heartbeat(run):
    def main():
        failures = record_root_failures()
        enders = this_host().spawn_procs({"w": 2}).spawn("enders", Ender)
        enders.initialized.get(timeout=30)
        enders.slice(w=0).kill.broadcast(int(signal.SIGSTOP))
        failure = failures.recv().get(timeout=60)
        with pytest.raises(SupervisionError):
            enders.slice(w=0).ping.call_one().get(timeout=30)
        assert enders.slice(w=1).ping.call_one().get(timeout=30) == "pong"
        return failure

    failure = run(main)
    assert "heartbeats" in failure.cause
    assert dict(failure.rank) == {"w": 0}
