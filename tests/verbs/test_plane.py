"""The verbs data plane of two procs in one process, over emulated devices (no actors)."""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from danaus.core.settings import Limits
from danaus.transports.tcp.ioloop import IoLoop
from danaus.transports.verbs import setup
from danaus.transports.verbs.device import Timeouts
from danaus.transports.verbs.emulated import EmulatedDevice
from danaus.transports.verbs.messages import INLINE_LIMIT, RECEIVES
from danaus.transports.verbs.plane import VerbsPlane
from danaus.transports.verbs.registrations import Registrations
from tests.verbs.devices import wait_until

DATA = b"D"


class Proc:
    """One side: an I/O thread, an emulated device, a plane, and what reached it."""

    def __init__(
        self, name: str, world: dict[str, Proc], *, events: bool = True, limit: int = 64 << 20
    ) -> None:
        self.name = name
        self.world = world
        self.io = IoLoop(f"test-io-{name}")
        self.io.start()
        self.device = EmulatedDevice(name, events=events)
        self.received: queue.Queue[tuple[str, list[Any]]] = queue.Queue()
        self.unreachable: queue.Queue[tuple[str, str]] = queue.Queue()
        self.refused: queue.Queue[tuple[str, list[Any], str]] = queue.Queue()
        self.plane = VerbsPlane(
            name,
            self.io,
            self.device,
            Registrations(self.device),
            Timeouts(timeout=14, retry_count=7),
            Limits(max_message_bytes=limit),
            lambda src, frames: self.received.put((src, frames)),
            self._setup,
            lambda peer, reason: self.unreachable.put((peer, reason)),
            lambda src, frames, reason: self.refused.put((src, frames, reason)),
        )
        world[name] = self

    def _setup(self, dest: str, message: setup.Setup) -> None:
        other = self.world[dest]
        other.io.call_soon(other.plane.handle, self.name, setup.decode(setup.encode(message)))

    def take(self, count: int, timeout: float = 30) -> list[tuple[str, list[Any]]]:
        return [self.received.get(timeout=timeout) for _ in range(count)]

    def close(self) -> None:
        self.plane.stop()
        self.io.stop()


@pytest.fixture
def procs(request) -> Iterator[tuple[Proc, Proc]]:
    events = getattr(request, "param", True)
    world: dict[str, Proc] = {}
    a, b = Proc("a", world, events=events), Proc("b", world, events=events)
    try:
        yield a, b
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("procs", [True, False], ids=["events", "polled"], indirect=True)
def test_messages_arrive_in_order_both_ways(procs):
    a, b = procs
    for i in range(50):
        a.plane.send("b", [DATA, i.to_bytes(4, "little")])
        b.plane.send("a", [DATA, b"x" * i])
    got_b = b.take(50)
    got_a = a.take(50)
    assert [(src, bytes(f[0]), int.from_bytes(f[1], "little")) for src, f in got_b] == [
        ("a", DATA, i) for i in range(50)
    ]
    assert [bytes(frames[1]) for _, frames in got_a] == [b"x" * i for i in range(50)]


def test_a_flood_of_sends_is_delivered_whole_in_order_without_receiver_not_ready(procs):
    a, b = procs
    count = 20_000
    for i in range(count):
        a.plane.send("b", [DATA, i.to_bytes(4, "little"), os.urandom(i % 300)])
    numbers = [int.from_bytes(frames[1], "little") for _, frames in b.take(count, timeout=120)]
    assert numbers == list(range(count))
    assert b.device.counters.rnr_naks_sent == 0
    registered = a.plane.registrations.registered
    for i in range(1000):
        a.plane.send("b", [DATA, i.to_bytes(4, "little")])
    b.take(1000)
    assert a.plane.registrations.registered == registered
    channel = a.plane._peers["b"].messages
    assert channel is not None and channel.credits.available <= RECEIVES


def test_a_flood_to_a_stalled_receiver_waits_for_credits_and_loses_nothing(procs):
    a, b = procs
    a.plane.send("b", [DATA, b"hello"])
    b.take(1)
    stall = threading.Event()
    b.io.call_soon(stall.wait, 60)
    count = 500
    for i in range(count):
        a.plane.send("b", [DATA, i.to_bytes(4, "little"), bytes(12 << 10)])
    channel = a.plane._peers["b"].messages
    assert channel is not None
    wait_until(
        lambda: channel.credits.available <= 1 and len(channel._queue) > 0,
        what="the sender to spend its credits",
    )
    wait_until(lambda: a.device.unanswered() == 0, what="answer to every SEND posted")
    assert b.received.empty()
    assert b.device.counters.rnr_naks_sent == 0
    stall.set()
    numbers = [int.from_bytes(frames[1], "little") for _, frames in b.take(count, timeout=120)]
    assert numbers == list(range(count))
    assert b.device.counters.rnr_naks_sent == 0


def test_a_message_over_the_limit_is_refused_its_sender_told_in_its_place_and_the_rest_flows():
    world: dict[str, Proc] = {}
    a, b = Proc("a", world), Proc("b", world, limit=4 << 20)
    try:
        a.plane.send("b", [DATA, b"before"])
        a.plane.send("b", [DATA, b"envelope", os.urandom(5 << 20), b"tail"])
        a.plane.send("b", [DATA, b"after"])
        assert [bytes(frames[1]) for _, frames in b.take(1)] == [b"before"]
        src, leading, reason = b.refused.get(timeout=30)
        assert (src, [bytes(f) for f in leading]) == ("a", [DATA, b"envelope"])
        assert reason.startswith(f"a message of {(5 << 20) + 13} bytes (more than the job's")
        assert [bytes(frames[1]) for _, frames in b.take(1)] == [b"after"]
        channel = a.plane._peers["b"].messages
        assert channel is not None
        wait_until(lambda: not channel._awaiting_release, what="the large frame released")
        assert a.unreachable.empty() and b.unreachable.empty()
    finally:
        a.close()
        b.close()


def test_large_frames_are_read_by_the_receiver_and_released(procs):
    a, b = procs
    sizes = [INLINE_LIMIT + 1, 3 << 20, 10, 20 << 20]
    payloads = [os.urandom(size) for size in sizes]
    for payload in payloads:
        a.plane.send("b", [DATA, b"head", payload, b"tail"])
    for payload, (_, frames) in zip(payloads, b.take(len(payloads))):
        assert [bytes(frames[1]), bytes(frames[3])] == [b"head", b"tail"]
        assert bytes(frames[2]) == payload
    channel = a.plane._peers["b"].messages
    assert channel is not None
    wait_until(channel.idle, what="the receiver to release every large frame")
    assert a.plane.registrations._idle_bytes >= sum(sizes[:2] + sizes[3:])
