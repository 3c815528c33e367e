"""Ports and channels: values sent to a place, from wherever the port travelled."""

from __future__ import annotations

import pytest

from danaus import Actor, Channel, Port, current_rank, endpoint, send, this_host


class Reporter(Actor):
    @endpoint
    def report(self, port: Port[int], value: int) -> None:
        port.send(value * 10 + current_rank().rank)

    @endpoint
    def fail_to(self, port: Port[int]) -> None:
        port.exception(KeyError("nope"))


class Doubler(Actor):
    @endpoint(explicit_response_port=True)
    def double(self, port: Port[int], value: int) -> None:
        port.send(2 * value)


def test_port_passed_to_actors_collects_their_sends(run):
    def main():
        reporters = this_host().spawn_procs({"gpus": 3}).spawn("r", Reporter)
        port, receiver = Channel.open()
        reporters.report.broadcast(port, 4)
        return sorted(receiver.recv().get() for _ in range(3))

    assert run(main) == [40, 41, 42]


def test_ranked_channel_gives_the_sender_rank(run):
    def main():
        reporters = this_host().spawn_procs({"gpus": 2}).spawn("r", Reporter)
        port, receiver = Channel.open_ranked()
        reporters.report.broadcast(port, 1)
        return sorted(receiver.recv().get() for _ in range(2))

    assert run(main) == [(0, 10), (1, 11)]


def test_exception_sent_to_a_port_raises_at_recv(run):
    def main():
        reporter = this_host().spawn_procs().spawn("r", Reporter)
        port, receiver = Channel.open()
        reporter.fail_to.broadcast(port)
        with pytest.raises(KeyError, match="nope"):
            receiver.recv().get()
        return True

    assert run(main)


def test_explicit_response_port_endpoint(run):
    def main():
        doublers = this_host().spawn_procs({"gpus": 2}).spawn("d", Doubler)
        return list(doublers.double.call(21).get().values())

    assert run(main) == [42, 42]


def test_send_primitive_routes_answers_to_a_port(run):
    def main():
        doublers = this_host().spawn_procs({"gpus": 3}).spawn("d", Doubler)
        port, receiver = Channel.open()
        send(doublers.double, (5,), {}, port=port)
        all_three = [receiver.recv().get() for _ in range(3)]
        send(doublers.double, (7,), {}, port=port, selection="choose")
        return all_three, receiver.recv().get()

    all_three, chosen = run(main)
    assert all_three == [10, 10, 10]
    assert chosen == 14


def test_receiver_cannot_be_sent(run):
    def main():
        reporter = this_host().spawn_procs().spawn("r", Reporter)
        _, receiver = Channel.open()
        with pytest.raises(TypeError):
            reporter.report.broadcast(receiver, 1)
        return True

    assert run(main)
