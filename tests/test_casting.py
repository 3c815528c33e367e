"""The shape of cast trees and what their senders send, seen in the simulator's trace."""

from __future__ import annotations

import pytest

import danaus.sim
from danaus import Actor, Channel, current_rank, endpoint, this_host
from danaus.chaos import crash
from danaus.chaos.checkers import delivery
from danaus.core import trace as ev
from danaus.core.casting import ENTRY_BYTES, SUBTREE_BYTES, Targets, split
from danaus.core.settings import Settings
from danaus.core.transport import ROOT
from danaus.core.wire import MAX_FANOUT


def targets(count: int, name: str = "p") -> Targets:
    return Targets([f"{name}{i}" for i in range(count)], range(count), range(count))


def test_runs_are_at_most_the_fanout_nearly_equal_and_cover_every_target():
    assert split(targets(64), 8) == [(i * 8, i * 8 + 8) for i in range(8)]
    assert split(targets(10), 4) == [(0, 3), (3, 6), (6, 8), (8, 10)]
    assert split(targets(3), 8) == [(0, 1), (1, 2), (2, 3)]


def test_runs_grow_in_number_when_their_names_would_not_fit_a_header():
    many = targets(1000, "x" * 200)
    runs = split(many, 2)
    assert len(runs) > 2
    for start, stop in runs:
        names = sum(len(proc) + ENTRY_BYTES for proc in many.procs[start:stop])
        assert names <= SUBTREE_BYTES + len(many.procs[-1]) + ENTRY_BYTES


def test_targets_without_the_lost():
    kept = targets(5).without({"p1", "p3"})
    assert (kept.procs, kept.points, kept.seqs) == (("p0", "p2", "p4"), (0, 2, 4), (0, 2, 4))


def test_the_fanout_comes_from_the_argument_then_the_environment():
    assert Settings.from_environment({}).cast_fanout == 8
    environment = Settings.from_environment({"DANAUS_CAST_FANOUT": "3"})
    assert environment.cast_fanout == 3
    assert environment.given(cast_fanout=5).cast_fanout == 5
    for bad in (1, 0, MAX_FANOUT + 1):
        with pytest.raises(ValueError, match="cast_fanout"):
            environment.given(cast_fanout=bad)
    for wrong in (True, 2.0):
        with pytest.raises(TypeError, match="cast_fanout"):
            environment.given(cast_fanout=wrong)
    with pytest.raises(ValueError, match="DANAUS_CAST_FANOUT"):
        Settings.from_environment({"DANAUS_CAST_FANOUT": "many"})


def test_configure_checks_the_fanout():
    with pytest.raises(ValueError, match="cast_fanout"):
        danaus.configure(transport="sim", cast_fanout=1)


class Echo(Actor):
    @endpoint
    def echo(self, x: int) -> int:
        return current_rank().rank + x


def _forwarded(run: danaus.sim.SimRun) -> list[ev.Forwarded]:
    return [e for e in run.trace.events if isinstance(e, ev.Forwarded)]


def _cast_once(procs: int, fanout: int) -> danaus.sim.SimRun:
    def main() -> list[int]:
        mesh = this_host().spawn_procs({"gpus": procs}).spawn("echo", Echo)
        mesh.initialized.get()
        return list(mesh.echo.call(0).get().values())

    return danaus.sim.run(main, hosts=2, cast_fanout=fanout)


def test_a_cast_to_at_most_fanout_procs_goes_straight_to_each():
    run = _cast_once(8, 8)
    assert run.value == list(range(8))
    assert _forwarded(run) == []


def test_the_sender_of_a_large_cast_sends_at_most_fanout_messages():
    run = _cast_once(64, 8)
    assert run.value == list(range(64))
    echoes = {
        (e.src, e.seq, e.dst)
        for e in run.trace.events
        if isinstance(e, ev.CallSent) and e.method == "echo"
    }
    hops = [e for e in _forwarded(run) if (e.src, e.seq, e.to) in echoes]
    from_root = [e for e in hops if e.proc == ROOT]
    assert len(from_root) == 8 and sum(e.procs for e in from_root) == 64
    assert len(hops) == 64  # each proc got the call once, from the root or from a forwarder
    assert delivery(run.trace.events) == []


def test_the_loss_of_a_forwarding_proc_makes_its_sender_adopt_its_part():
    def main() -> tuple[str, int, list[int]]:
        failures, receiver = Channel.open()
        danaus.unhandled_fault_hook = failures.send
        mesh = this_host().spawn_procs({"gpus": 9}).spawn("echo", Echo)
        mesh.initialized.get()
        pending = list(mesh.echo.stream(0))
        [forwarder] = crash(mesh.slice(gpus=0))
        answered = []
        for future in pending:
            try:
                answered.append(future.get())
            except danaus.SupervisionError:
                answered.append(-1)
        return forwarder, receiver.recv().get().rank.rank, sorted(answered)

    run = danaus.sim.run(main, hosts=2, cast_fanout=2)
    forwarder, failed, answered = run.value
    assert (failed, answered) == (0, [-1, *range(1, 9)])
    adopted = {(e.proc, e.lost) for e in run.trace.events if isinstance(e, ev.Adopted)}
    assert adopted == {(ROOT, forwarder)}
    assert delivery(run.trace.events) == []  # each live member got each call once, in order
    again = danaus.sim.run(main, hosts=2, cast_fanout=2)
    assert again.digest == run.digest
