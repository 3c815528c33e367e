"""On the simulator, actors that wait on each other in a cycle are named, not just stalled."""

from __future__ import annotations

import pytest

import danaus.sim
from danaus import Actor, Channel, endpoint, this_host
from danaus.sim import SimulationStalled


class Peer(Actor):
    def __init__(self) -> None:
        self.peer = None

    @endpoint
    def introduce(self, peer) -> None:
        self.peer = peer

    @endpoint
    def ask(self) -> int:
        return self.peer.answer.call_one().get()

    @endpoint
    def answer(self) -> int:
        if self.peer is None:
            _, never = Channel.open()  # nobody will ever send to it
            return never.recv().get()
        return self.peer.echo.call_one().get()

    @endpoint
    def echo(self) -> int:
        return 1


def deadlock() -> int:
    procs = this_host().spawn_procs({"p": 1})
    alice, bob = procs.spawn("alice", Peer), procs.spawn("bob", Peer)
    alice.introduce.call_one(bob).get()
    bob.introduce.call_one(alice).get()
    return alice.ask.call_one().get()


def test_a_cycle_of_waiting_actors_is_named():
    with pytest.raises(SimulationStalled) as stalled:
        danaus.sim.run(deadlock)
    message = str(stalled.value)
    assert "deadlock" in message
    cycle = next(line for line in message.splitlines() if "waits for" in line)
    assert "alice[0] (handling ask)" in cycle and "bob[0] (handling answer)" in cycle
    assert cycle.count("waits for") == 2


def test_waits_outside_any_cycle_are_listed():
    """Alice waits on Carol, who waits on a channel nobody sends to: no cycle, but who waits."""

    def waits_forever() -> None:
        procs = this_host().spawn_procs({"p": 1})
        alice, carol = procs.spawn("alice", Peer), procs.spawn("carol", Peer)
        alice.introduce.call_one(carol).get()
        alice.ask.call_one().get()

    with pytest.raises(SimulationStalled) as stalled:
        danaus.sim.run(waits_forever)
    message = str(stalled.value)
    assert "deadlock" not in message
    assert "alice[0] (handling ask) waits for" in message
    assert "carol[0] (handling answer)" in message
