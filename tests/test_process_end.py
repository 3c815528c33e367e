"""On sim, the functions that end a process end the simulated proc of the actor calling them.

They are replaced while a world lives, act so only for that world's actors, and are the
standard functions again once no world lives (`danaus.transports.sim.process_end`).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import danaus
import danaus.sim
from danaus import Actor, SupervisionError, endpoint, this_host
from danaus.core import config
from danaus.core.settings import Settings
from danaus.core.trace import Down, Trace
from danaus.transports.sim import SimWorld

ROOT = Path(__file__).resolve().parents[1]


def standard() -> tuple[object, ...]:
    return (os._exit, os.kill, os.abort, os.getpid, signal.raise_signal)


STANDARD = standard()


class Ender(Actor):
    @endpoint
    def abort(self) -> None:
        os.abort()

    @endpoint
    def raise_signal(self, sig: int) -> str:
        signal.raise_signal(sig)
        return "still running"

    @endpoint
    def kill(self, sig: int) -> str:
        os.kill(os.getpid(), sig)
        return "still running"

    @endpoint
    def exit(self, code: int) -> None:
        os._exit(code)

    @endpoint
    def pid(self) -> int:
        return os.getpid()

    @endpoint
    def kill_pid(self, pid: int, sig: int) -> str:
        os.kill(pid, sig)
        return "still running"

    @endpoint
    def functions(self) -> list[bool]:
        return [a is b for a, b in zip(standard(), STANDARD)]



async def ended_procs() -> str:
    """Spawn two procs and have one end itself; return what the other answers."""
    enders = this_host().spawn_procs({"w": 2}).spawn("enders", Ender)
    with pytest.raises(SupervisionError, match=r"Exited\(code=5\)"):
        await enders.slice(w=0).exit.call_one(5)
    return await enders.slice(w=1).kill.call_one(0)


def ended(trace: Trace) -> list[str]:
    """Why the procs of a run that did not stop ended, in order, from its trace."""
    return [
        event.reason
        for event in trace.events
        if isinstance(event, Down) and event.reason != "stopped"
    ]


def ignore_failures() -> None:
    danaus.unhandled_fault_hook = lambda failure: None


def test_the_functions_are_replaced_while_a_world_lives_and_act_so_for_its_actors_only():
    def main():
        enders = this_host().spawn_procs({"w": 1}).spawn("enders", Ender)
        inside = enders.functions.call_one().get(timeout=30)
        os.kill(os.getpid(), 0)  # the controller's own call: the standard function's
        with pytest.raises(ProcessLookupError):
            os.kill(2**22 + 10**6, 0)  # nobody's pid: the standard function's
        return inside

    assert danaus.sim.run(main).value == [False] * 5
    assert standard() == STANDARD


def test_an_abort_or_a_raised_signal_ends_the_proc_and_the_code_after_never_runs():
    def main():
        ignore_failures()
        enders = this_host().spawn_procs({"w": 4}).spawn("enders", Ender)
        causes = []
        for rank, call in enumerate(
            (
                lambda e: e.abort.call_one(),
                lambda e: e.raise_signal.call_one(int(signal.SIGTERM)),
                lambda e: e.exit.call_one(6),
            )
        ):
            with pytest.raises(SupervisionError) as raised:
                call(enders.slice(w=rank)).get(timeout=30)
            causes.append(str(raised.value))
        answer = enders.slice(w=3).raise_signal.call_one(int(signal.SIGCHLD)).get(timeout=30)
        return causes, answer

    causes, answer = danaus.sim.run(main).value
    assert "Killed(sig=6)" in causes[0]
    assert "Killed(sig=15)" in causes[1]
    assert "Exited(code=6)" in causes[2]
    assert answer == "still running"


def test_each_proc_has_a_pid_of_its_own_that_signals_reach():
    """From another proc or from the controller, os.kill with a simulated proc's pid signals
    that proc alone; its sender goes on. Signal 0 finds it while it lives."""

    def main():
        ignore_failures()
        enders = this_host().spawn_procs({"w": 4}).spawn("enders", Ender)
        pids = list(enders.pid.call().get(timeout=30).values())
        by_actor = enders.slice(w=0).kill_pid.call_one(pids[1], int(signal.SIGKILL))
        sender = by_actor.get(timeout=30)
        os.kill(pids[2], signal.SIGTERM)
        os.kill(pids[3], 0)
        reports = []
        for rank in (1, 2):
            with pytest.raises(SupervisionError) as raised:
                enders.slice(w=rank).pid.call_one().get(timeout=30)
            reports.append(str(raised.value))
        with pytest.raises(ProcessLookupError):
            os.kill(pids[2], 0)
        return pids, sender, reports, enders.slice(w=3).pid.call_one().get(timeout=30)

    pids, sender, reports, survivor = danaus.sim.run(main).value
    assert len(set(pids)) == 4 and os.getpid() not in pids and min(pids) > 2**22
    assert sender == "still running"
    assert "Killed(sig=9)" in reports[0] and "Killed(sig=15)" in reports[1]
    assert survivor == pids[3]


def test_a_signal_that_does_not_exist_is_refused_as_by_the_os():
    def main():
        enders = this_host().spawn_procs({"w": 1}).spawn("enders", Ender)
        with pytest.raises(Exception, match="Invalid argument"):
            enders.kill.call_one(signal.NSIG + 10).get(timeout=30)
        return enders.kill.call_one(0).get(timeout=30)

    assert danaus.sim.run(main).value == "still running"


def test_ending_procs_replays_the_same_trace():
    async def main():
        ignore_failures()
        enders = this_host().spawn_procs({"w": 3}).spawn("enders", Ender)
        enders.slice(w=0).exit.broadcast(9)
        enders.slice(w=1).kill.broadcast(int(signal.SIGKILL))
        enders.slice(w=2).abort.broadcast()
        return await ended_procs()

    first, second = (danaus.sim.run(main, seed=4) for _ in range(2))
    assert first.value == second.value == "still running"
    assert first.digest == second.digest
    assert ended(first.trace) == ["exited", "was killed", "was killed", "exited"]


def test_two_worlds_alive_at_once_end_each_their_own_procs():
    """Two worlds live side by side; an actor of each, in turn, ends its proc: that proc
    alone ends, in its own world, and the other world's procs live on."""
    ignore_failures()
    worlds = [SimWorld(Settings(seed=1)), SimWorld(Settings(seed=2))]
    meshes = []
    try:
        for world in worlds:
            config.install(world)
            meshes.append(this_host().spawn_procs({"w": 2}).spawn("enders", Ender))
            assert list(meshes[-1].kill.call(0).get(timeout=30).values()) == ["still running"] * 2
        for turn, (world, enders) in enumerate(zip(worlds, meshes)):
            config.install(world)
            with pytest.raises(SupervisionError, match=rf"Exited\(code={turn + 3}\)"):
                enders.slice(w=0).exit.call_one(turn + 3).get(timeout=30)
            assert enders.slice(w=1).kill.call_one(0).get(timeout=30) == "still running"
            assert [len(w.worker_procs("h0")) for w in worlds] == [1, 1 + (turn == 0)]
    finally:
        config.install(None)
        for world in worlds:
            world.shutdown()
    assert [ended(world.trace) for world in worlds] == [["exited"], ["exited"]]
    assert standard() == STANDARD


def test_the_controllers_own_exit_ends_its_process_as_on_a_real_transport(tmp_path):
    program = tmp_path / "ends.py"
    program.write_text(
        textwrap.dedent(
            """
            import asyncio, os
            import danaus
            from danaus import this_host

            async def main():
                this_host().spawn_procs({"w": 1})
                os._exit(7)

            danaus.configure(transport="sim")
            asyncio.run(main())
            """
        )
    )
    done = subprocess.run(
        [sys.executable, str(program)], cwd=ROOT, capture_output=True, timeout=120
    )
    assert done.returncode == 7, done.stderr.decode()
