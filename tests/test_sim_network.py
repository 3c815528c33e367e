"""The simulated network's event order: messages arrive as if each were alone on the heap."""

from __future__ import annotations

import math
import random

import pytest

from danaus.core.trace import Trace
from danaus.core.wire import Reply, decode, encode
from danaus.transports.sim.network import NetworkModel, SimNetwork
from danaus.transports.sim.timeline import Timeline


def run_all(timeline: Timeline) -> None:
    """Process every event (there is no event loop here to stop early for)."""
    timeline.advance(math.inf, [], {}, lambda: False)


@pytest.mark.parametrize("seed", range(5))
def test_messages_arrive_in_time_then_send_order_whatever_their_lane(seed):
    """Through one queue or several, slowed down or delayed out of order, every message
    arrives at its time, and messages due at the same time in the order they were sent."""
    rng = random.Random(seed)
    timeline = Timeline()
    network = SimNetwork(
        timeline, None, NetworkModel(), random.Random(seed), Trace(lambda: timeline.now)
    )
    procs = [f"p{i}" for i in range(6)]
    arrived: list[tuple[float, int]] = []
    for i, proc in enumerate(procs):
        network.add_host(f"h{i % 3}")
        endpoint = network.attach(proc, f"h{i % 3}")
        endpoint.start(
            lambda src, frames: arrived.append((timeline.now, int(frames[0][:4]))), None, None, None
        )
        network.up(proc)
    heals = []
    sent = 0

    def burst(_: object) -> None:
        nonlocal sent
        for _ in range(rng.randrange(1, 30)):
            if rng.random() < 0.1:
                heals.append(network.slow(rng.choice(procs), rng.random() * 1e-4))
            if heals and rng.random() < 0.1:
                heals.pop(rng.randrange(len(heals)))()
            if rng.random() < 0.1:
                network.extra_delay = (lambda: rng.random() * 1e-5) if rng.random() < 0.5 else None
            src, dst = rng.choice(procs), rng.choice(procs)
            network.endpoints[src].send(dst, [b"%04d" % sent + bytes(rng.randrange(10_000))])
            sent += 1

    for t in sorted(rng.random() * 1e-4 for _ in range(20)):
        timeline.call_later(t, burst)
    run_all(timeline)
    assert len(arrived) == sent
    assert arrived == sorted(arrived)
    assert len({t for t, _ in arrived}) < sent  # some were due together


def test_a_proc_attached_again_gets_what_is_sent_to_its_id_even_in_flight():
    """Routes remember each destination's endpoint: one attached again under the same proc id
    (a proc restarted) takes its place, for messages already on their way and later ones."""
    timeline = Timeline()
    network = SimNetwork(
        timeline, None, NetworkModel(), random.Random(0), Trace(lambda: timeline.now)
    )
    got: list[tuple[str, bytes]] = []
    network.add_host("h0")
    network.add_host("h1")

    def attach(proc: str, host: str, name: str):
        endpoint = network.attach(proc, host)
        endpoint.start(lambda src, frames: got.append((name, bytes(frames[0]))), None, None, None)
        network.up(proc)
        return endpoint

    sender = attach("a", "h0", "a")
    attach("b", "h1", "first b")
    sender.send("b", [b"1"])
    run_all(timeline)
    sender.send("b", [b"2"])
    network.down("b", "restarted")
    attach("b", "h1", "second b")
    sender.send("b", [b"3"])
    run_all(timeline)
    assert got == [("first b", b"1"), ("second b", b"2"), ("second b", b"3")]


def _send_once(envelope: Reply, payload: list, as_object: bool) -> tuple[float, Reply, list]:
    """When ``envelope`` and ``payload`` from proc a reach proc b, and what b gets."""
    timeline = Timeline()
    network = SimNetwork(
        timeline, None, NetworkModel(), random.Random(0), Trace(lambda: timeline.now)
    )
    got = []

    def on_frames(src, frames):
        got.append((timeline.now, *decode(frames)))

    def on_message(src, envelope, frames):
        got.append((timeline.now, envelope, frames))

    for proc, host in (("a", "h0"), ("b", "h1")):
        network.add_host(host)
        network.attach(proc, host).start(on_frames, None, None, on_message)
        network.up(proc)
    if as_object:
        network.endpoints["a"].send_message("b", envelope, payload)
    else:
        network.endpoints["a"].send("b", encode(envelope, payload))
    run_all(timeline)
    [arrival] = got
    return arrival


def test_an_envelope_sent_as_an_object_arrives_as_it_would_encoded_with_its_payload_copied():
    """`send_message` hands the receiver the envelope itself, not frames to decode, and the
    payload as a copy; the message takes the time its encoded frames would have taken."""
    envelope = Reply(7, 0, False, "a/actor", 3)
    payload = [bytearray(b"x" * 5000)]
    encoded_at, decoded, _ = _send_once(envelope, payload, as_object=False)
    at, received, frames = _send_once(envelope, payload, as_object=True)
    assert decoded == envelope and decoded is not envelope
    assert received is envelope
    assert frames == payload and frames[0] is not payload[0]
    assert at == encoded_at
