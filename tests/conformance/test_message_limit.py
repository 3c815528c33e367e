"""Messages over the job's ``max_message_bytes``: refused where they are sent, at once, and
nothing else suffers (the same on every transport, since the sender checks)."""

from __future__ import annotations

import pytest

from danaus import Actor, ActorError, Channel, MessageTooLargeError, Port, endpoint, this_host

MiB = 1 << 20
LIMIT = 4 * MiB
"""The job's limit here (``frame_bytes``, 4 MiB by default on the real transports, may not
exceed it)."""
OVER = 5 * MiB


class Holder(Actor):
    def __init__(self, data: bytes) -> None:
        self.data = data


class Sink(Actor):
    @endpoint
    def length(self, data: bytes) -> int:
        return len(data)

    @endpoint
    def make(self, count: int) -> bytes:
        return bytes(count)

    @endpoint
    def send_to(self, port: Port[bytes], count: int) -> str:
        try:
            port.send(bytes(count))
        except MessageTooLargeError as exc:
            return str(exc)
        return "sent"


def test_a_call_or_spawn_over_the_limit_fails_at_once_and_the_proc_stays_reachable(run):
    def main():
        procs = this_host().spawn_procs({"w": 2})
        sinks = procs.spawn("sinks", Sink)
        with pytest.raises(MessageTooLargeError) as refused:
            sinks.slice(w=0).length.call_one(bytes(OVER))
        with pytest.raises(MessageTooLargeError):
            sinks.length.broadcast(bytes(OVER))
        with pytest.raises(MessageTooLargeError, match="spawning Holder with these arguments"):
            procs.spawn("holders", Holder, bytes(OVER))
        after = sinks.length.call(bytes(LIMIT - 1024)).get(timeout=60)
        procs.stop().get(timeout=60)
        return str(refused.value), list(after.values())

    message, after = run(main, max_message_bytes=LIMIT)
    assert "a call of Sink.length() is 5242" in message
    assert f"more than the job's max_message_bytes ({LIMIT})" in message
    assert after == [LIMIT - 1024] * 2


def test_an_answer_over_the_limit_fails_its_call_and_the_actor_lives_on(run):
    def main():
        sink = this_host().spawn_procs().spawn("sink", Sink)
        with pytest.raises(ActorError) as failed:
            sink.make.call_one(OVER).get(timeout=60)
        return failed.value.exception, sink.length.call_one(b"still here").get(timeout=60)

    exception, after = run(main, max_message_bytes=LIMIT)
    assert isinstance(exception, MessageTooLargeError)
    assert "the answer of Sink.make is 5242" in str(exception)
    assert after == len(b"still here")


def test_a_value_over_the_limit_sent_to_a_port_raises_where_it_is_sent(run):
    def main():
        sink = this_host().spawn_procs().spawn("sink", Sink)
        port, receiver = Channel.open()
        refused = sink.send_to.call_one(port, OVER).get(timeout=60)
        assert sink.send_to.call_one(port, 10).get(timeout=60) == "sent"
        return refused, receiver.recv().get(timeout=60)

    refused, arrived = run(main, max_message_bytes=LIMIT)
    assert "a value sent to a port is 5242" in refused
    assert arrived == bytes(10)
