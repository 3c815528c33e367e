"""Bad input is refused where it is given, and a refused message is answered, never dropped."""

from __future__ import annotations

import pytest

from danaus import Actor, Channel, SerializationError, context, endpoint, this_host
from danaus.core import config
from danaus.core.actor_mesh import placement_of
from danaus.core.serialize import dumps
from danaus.core.wire import Call, encode


class Echo(Actor):
    @endpoint
    def ping(self) -> str:
        return "pong"


def test_shapes_are_checked_at_the_call(run):
    def main():
        host = this_host()
        problems = []
        for per_host, error in [
            ({"w": True}, TypeError),
            ({"w": 1.0}, TypeError),
            (["w"], TypeError),
            ({"w": 0}, ValueError),
            ({"w": config.current_world().options.max_procs_per_host + 1}, ValueError),
        ]:
            with pytest.raises(error) as refused:
                host.spawn_procs(per_host)
            problems.append(str(refused.value))
        echo = host.spawn_procs({"w": 1}).spawn("echo", Echo)
        return problems, echo.ping.call_one().get(timeout=30)

    problems, answer = run(main)
    assert "must be an int, got bool True" in problems[0]
    assert "must be a dict" in problems[2]
    assert "max_procs_per_host" in problems[4]
    assert answer == "pong"


def _sent_to_an_echo(send, bad_call):
    """``main`` for `run`: ``bad_call(mesh_id, reply)`` sent to an echo actor's proc by
    ``send(runtime, proc, call)``; the error its caller heard, then the echo's next answer."""

    def main():
        echo = this_host().spawn_procs({"w": 1}).spawn("echo", Echo)
        echo.initialized.get(timeout=30)
        port, answers = Channel.open()
        runtime = context().actor_instance.runtime
        [(proc, _)] = placement_of(echo).targets()
        send(runtime, proc, bad_call(placement_of(echo).mesh_id, port.ref))
        with pytest.raises(SerializationError) as refused:
            answers.recv().get(timeout=30)
        return str(refused.value), echo.ping.call_one().get(timeout=30)

    return main


def test_a_call_the_receiver_rejects_is_answered_with_an_error(run):
    """A message that fails validation at the receiving proc still ends its caller's wait."""
    refused, answer = run(
        _sent_to_an_echo(
            lambda runtime, proc, bad: runtime.transport.send(proc, encode(bad, dumps(((), {})))),
            lambda mesh, reply: Call(mesh, "ping", reply, 0, ("w",), (True,), "root/client", 0),
        )
    )
    assert "rejected the call" in refused and "bool" in refused
    assert answer == "pong"


def test_an_invalid_envelope_sent_as_an_object_is_rejected_as_its_frames_would_be(run):
    """A transport may hand an envelope over without encoding it (`send_message`): the
    receiver still validates it, and its caller hears why it was rejected."""
    refused, answer = run(
        _sent_to_an_echo(
            lambda runtime, proc, bad: runtime.transport.send_message(proc, bad, dumps(((), {}))),
            lambda mesh, reply: Call(mesh, "ping", reply, 1, ("w",), (1,), "root/client", 0),
        )
    )
    assert "rejected the call" in refused and "point out of range" in refused
    assert answer == "pong"
