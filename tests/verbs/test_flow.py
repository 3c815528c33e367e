"""Credit-based flow control and the message stream, on their own (no device)."""

from __future__ import annotations

import os
from collections import deque

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from danaus.transports.verbs.credits import Credits
from danaus.transports.verbs.stream import (
    MAX_FRAMES,
    Outgoing,
    Reassembly,
    RemoteFrame,
    StreamError,
)


class _Side:
    """One end of a message queue pair, as the plane drives it."""

    def __init__(self, receives: int, messages: int) -> None:
        self.credits = Credits(receives)
        self.free = receives
        """Receive buffers posted and empty."""
        self.filled = 0
        """Receive buffers holding a message not yet copied out and reposted."""
        self.to_send = messages
        self.delivered = 0

    def act(self, wire: deque[tuple[bool, int]]) -> None:
        """Send what the credits allow, then an update if one is due (the plane's pump)."""
        while self.to_send and self.credits.can_send_data():
            wire.append((True, self.credits.take()))
            self.to_send -= 1
        if self.credits.update_due():
            wire.append((False, self.credits.take()))

    def arrive(self, data: bool, reported: int) -> None:
        assert self.free > 0, "a SEND arrived with no receive posted (receiver not ready)"
        self.free -= 1
        self.filled += 1
        self.credits.returned(reported)
        self.delivered += data

    def repost(self) -> None:
        self.filled -= 1
        self.free += 1
        self.credits.reposted()


@settings(max_examples=300, deadline=None)
@given(
    receives=st.integers(3, 6),
    messages=st.tuples(st.integers(0, 40), st.integers(0, 40)),
    schedule=st.lists(st.integers(0, 5), max_size=400),
)
def test_credits_never_overfill_a_receive_queue_and_never_stall(receives, messages, schedule):
    sides = [_Side(receives, messages[0]), _Side(receives, messages[1])]
    wires: list[deque[tuple[bool, int]]] = [deque(), deque()]

    def step(choice: int) -> bool:
        side, other = choice % 2, 1 - choice % 2
        if choice < 2:
            sides[side].act(wires[side])
            return False
        if choice < 4:
            if not wires[side]:
                return False
            sides[other].arrive(*wires[side].popleft())
            return True
        if not sides[side].filled:
            return False
        sides[side].repost()
        return True

    for choice in schedule:
        step(choice)
    for _ in range(10 * (sum(messages) + receives)):
        moved = [step(choice) for choice in (2, 3, 4, 5)]
        sides[0].act(wires[0])
        sides[1].act(wires[1])
        if not any(moved) and not wires[0] and not wires[1]:
            break
    else:
        pytest.fail("the two sides never went quiet: updates answer updates")
    assert [s.to_send for s in sides] == [0, 0]
    assert [s.delivered for s in sides] == [messages[1], messages[0]]


def _stream(messages, inline_limit=64, fragment=37):
    """The stream bytes of ``messages``, cut into fragments of ``fragment`` bytes."""
    pins = []

    def pin(view):
        pins.append(view)
        return _FakePin(len(pins))

    data = bytearray()
    for frames in messages:
        out = Outgoing(frames, pin, inline_limit)
        chunk = memoryview(bytearray(fragment))
        while not out.done:
            data += chunk[: out.fill(chunk)]
    return [bytes(data[i : i + fragment]) for i in range(0, len(data), fragment)], pins


class _FakePin:
    def __init__(self, number: int) -> None:
        self.rkey = number

    def iova(self) -> int:
        return 1000 * self.rkey


@given(
    messages=st.lists(
        st.lists(st.binary(max_size=200), min_size=1, max_size=5), min_size=1, max_size=6
    ),
    fragment=st.integers(1, 300),
)
def test_messages_survive_any_cut_into_fragments(messages, fragment):
    pieces, pins = _stream(messages, fragment=fragment)
    reassembly = Reassembly(max_message_bytes=1 << 20)
    arrived = [m for piece in pieces for m in reassembly.feed(memoryview(piece))]
    assert len(arrived) == len(messages)
    remote_pins = iter(pins)
    for frames, message in zip(messages, arrived):
        assert message.error is None
        assert [f.nbytes for f in message.frames] == [len(f) for f in frames]
        remote = {r.index: r for r in message.remote}
        for index, frame in enumerate(frames):
            if len(frame) > 64:
                assert remote[index].size == len(frame)
                assert bytes(next(remote_pins)) == frame
            else:
                assert bytes(message.frames[index]) == frame


def test_a_message_over_the_limit_is_refused_with_its_leading_frames_and_the_stream_goes_on():
    big = [b"k", os.urandom(100), os.urandom(500), os.urandom(150)]
    pieces, _ = _stream([big, [b"k", b"after"]], inline_limit=200)
    reassembly = Reassembly(max_message_bytes=400)
    first, second = [m for piece in pieces for m in reassembly.feed(memoryview(piece))]
    assert first.error == "a message of 751 bytes (at most 400)"
    assert [bytes(f) for f in first.frames] == big[:2], "the frames before the first large one"
    assert first.remote == [RemoteFrame(2, 500, 1000, 1)]
    assert [bytes(f) for f in second.frames] == [b"k", b"after"]


@pytest.mark.parametrize("count", [0, MAX_FRAMES + 1])
def test_a_frame_count_out_of_range_is_refused_before_anything_is_allocated(count):
    with pytest.raises(StreamError, match=f"a message of {count} frames"):
        Reassembly(max_message_bytes=1 << 20).feed(memoryview(count.to_bytes(4, "little")))
