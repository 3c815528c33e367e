"""Undeliverable messages come back to their sender: its _handle_undeliverable_message decides."""

from __future__ import annotations

import pytest

import danaus
from danaus import (
    Actor,
    Channel,
    Port,
    SupervisionError,
    UndeliverableMessageEnvelope,
    endpoint,
    this_host,
)
from danaus.chaos import crash
from danaus.core.wire import PortRef


class Target(Actor):
    @endpoint
    def ping(self) -> str:
        return "pong"

    @endpoint
    def take(self, value: int) -> None:
        return None


class Sender(Actor):
    """Sends where it is told; tells ``notes`` of what comes back, if it handles it."""

    def __init__(self, notes: Port[tuple[str, str, str]] | None = None) -> None:
        self.notes = notes

    @endpoint
    def cast(self, target: Target | Keeper, value: int) -> None:
        target.take.broadcast(value)

    @endpoint
    def ping(self, target: Target) -> str:
        try:
            return target.ping.call_one().get()
        except SupervisionError:
            return "lost"

    @endpoint
    def send_to(self, port: Port[int], value: int, returnable: bool) -> None:
        port.return_undeliverable = returnable
        port.send(value)

    @endpoint
    def alive(self) -> bool:
        return True

    def _handle_undeliverable_message(self, message: UndeliverableMessageEnvelope) -> bool:
        if self.notes is None:
            return super()._handle_undeliverable_message(message)
        self.notes.send((message.sender(), message.dest(), message.error_msg()))
        return True


class Keeper(Actor):
    """Opens a port on its own proc and hands it out."""

    def __init__(self) -> None:
        self.port, self.receiver = Channel.open()

    @endpoint
    def port_of(self) -> Port[int]:
        return self.port

    @endpoint
    def ping(self) -> str:
        return "pong"

    @endpoint
    def take(self, value: int) -> None:
        return None


def record_root_failures():
    port, receiver = Channel.open()
    danaus.unhandled_fault_hook = port.send
    return receiver


def test_a_cast_to_a_stopped_actor_comes_back_to_its_sender(run):
    def main():
        notes, returned = Channel.open()
        target = this_host().spawn_procs().spawn("target", Target)
        sender = this_host().spawn_procs().spawn("sender", Sender, notes)
        target.stop().get()
        sender.cast.call_one(target, 1).get()
        message = returned.recv().get()
        return message, sender.alive.call_one().get()

    (sent_by, dest, why), alive = run(main)
    assert "sender" in sent_by
    assert "target" not in sent_by and ".take" in dest
    assert "stopped" in why
    assert alive


def test_an_unhandled_undeliverable_message_fails_the_sender(run):
    def main():
        failures = record_root_failures()
        target = this_host().spawn_procs().spawn("target", Target)
        sender = this_host().spawn_procs().spawn("sender", Sender)
        target.stop().get()
        sender.cast.call_one(target, 1).get()
        failure = failures.recv().get()
        with pytest.raises(SupervisionError):
            sender.alive.call_one().get()
        return failure.mesh_name, failure.cause

    name, cause = run(main)
    assert name == "sender"
    assert "could not be delivered" in cause and "stopped" in cause


def test_the_controllers_undeliverable_message_goes_to_the_fault_hook(run):
    def main():
        failures = record_root_failures()
        procs = this_host().spawn_procs()
        target = procs.spawn("target", Target)
        reference = Channel.open()  # a port to pass the mesh through, as a reference
        reference[0].send(target)
        stale = reference[1].recv().get()
        target.stop().get()
        stale.take.broadcast(1)
        return failures.recv().get().cause

    assert "could not be delivered" in run(main)


@pytest.mark.parametrize("returnable", [True, False])
def test_a_value_for_a_port_never_opened(run, returnable):
    def main():
        failures = record_root_failures()
        notes, returned = Channel.open()
        keeper = this_host().spawn_procs().spawn("keeper", Keeper)
        sender = this_host().spawn_procs().spawn("sender", Sender, notes)
        real = keeper.port_of.call_one().get()
        never_opened = Port(PortRef(real._ref.proc, real._ref.port + 1000))
        sender.send_to.call_one(never_opened, 7, returnable).get()
        if not returnable:
            with pytest.raises(TimeoutError):
                returned.recv().get(timeout=1.0)
            with pytest.raises(TimeoutError):
                failures.recv().get(timeout=0.1)
            return None
        return returned.recv().get()

    result = run(main)
    if returnable:
        sent_by, dest, why = result
        assert "sender" in sent_by and "ever opened" in why and dest.startswith("root")
    else:
        assert result is None


def test_messages_to_a_lost_proc_are_dropped_and_the_loss_reported_once(run):
    def main():
        failures = record_root_failures()
        notes, returned = Channel.open()
        keeper_procs = this_host().spawn_procs()
        keeper = keeper_procs.spawn("keeper", Keeper)
        sender = this_host().spawn_procs().spawn("sender", Sender, notes)
        port = keeper.port_of.call_one().get()
        assert sender.ping.call_one(keeper).get() == "pong"  # the sender watches that proc now
        crash(keeper_procs)
        lost = failures.recv().get()  # the keeper's loss reached its owner
        assert sender.ping.call_one(keeper).get() == "lost"
        sender.send_to.call_one(port, 7, True).get()
        sender.cast.call_one(keeper, 1).get()
        with pytest.raises(TimeoutError):
            returned.recv().get(timeout=1.0)
        with pytest.raises(TimeoutError):
            failures.recv().get(timeout=0.1)
        return lost.mesh_name, sender.alive.call_one().get()

    assert run(main) == ("keeper", True)


def test_a_value_for_a_closed_port_is_dropped(run):
    def main():
        failures = record_root_failures()
        port, receiver = Channel.open(once=True)
        sender = this_host().spawn_procs().spawn("sender", Sender)
        sender.send_to.call_one(port, 1, True).get()
        first = receiver.recv().get()
        sender.send_to.call_one(port, 2, True).get()
        with pytest.raises(TimeoutError):
            failures.recv().get(timeout=1.0)
        return first, sender.alive.call_one().get()

    assert run(main) == (1, True)
