"""Small messages on zmq and large ones on UCX still reach each actor in the order sent."""

from __future__ import annotations

import asyncio
import logging
import os

import pytest

pytest.importorskip("ucxx")

import danaus
from danaus import Actor, endpoint, this_host
from danaus.transports.ucx.split import LARGE_BYTES, SplitPlane


class Recorder(Actor):
    def __init__(self) -> None:
        self.seen: list[tuple[int, int]] = []

    @endpoint
    def take(self, index: int, payload: bytes) -> None:
        self.seen.append((index, len(payload)))

    @endpoint
    def taken(self) -> list[tuple[int, int]]:
        return self.seen


class Sender(Actor):
    @endpoint
    def send_mixed(self, recorder: Recorder, count: int) -> tuple[list, list]:
        """Sends, then asks what arrived: its question comes after its sends."""
        sizes = [LARGE_BYTES * 2 if index % 3 == 0 else 10 for index in range(count)]
        for index, size in enumerate(sizes):
            recorder.take.broadcast(index, os.urandom(size))
        return list(enumerate(sizes)), recorder.taken.call_one().get(timeout=60)


def test_large_and_small_messages_of_one_sender_arrive_in_order():
    danaus.configure(transport="ucx")
    try:
        procs = this_host().spawn_procs({"w": 2})
        recorder = procs.slice(w=1).spawn("recorder", Recorder)
        sender = procs.slice(w=0).spawn("sender", Sender)
        sent, taken = sender.send_mixed.call_one(recorder, 30).get(timeout=60)
        assert [tuple(pair) for pair in taken] == [tuple(pair) for pair in sent]
    finally:
        danaus.shutdown()


class _Plane:
    address = "here"

    def __init__(self) -> None:
        self.sent: list[tuple[str, list[bytes]]] = []

    def send(self, dest: str, message: list[bytes]) -> None:
        self.sent.append((dest, message))


def _split() -> tuple[
    SplitPlane, _Plane, _Plane, list[tuple[str, list[bytes]]], asyncio.AbstractEventLoop
]:
    loop = asyncio.new_event_loop()
    delivered: list[tuple[str, list[bytes]]] = []
    small, large = _Plane(), _Plane()
    split = SplitPlane("p", small, large, loop, lambda src, frames: delivered.append((src, frames)))  # type: ignore[arg-type]
    return split, small, large, delivered, loop


def test_a_message_is_sent_by_size_and_numbered_per_receiver():
    split, small, large, _, loop = _split()
    split.send("b", [b"D", b"x"])
    split.send("b", [b"D", bytes(LARGE_BYTES)])
    split.send("c", [b"D", b"y"])
    assert [(dest, message[-1]) for dest, message in small.sent] == [
        ("b", (0).to_bytes(8, "little")),
        ("c", (0).to_bytes(8, "little")),
    ]
    assert [(dest, message[-1]) for dest, message in large.sent] == [
        ("b", (1).to_bytes(8, "little"))
    ]
    loop.close()


def test_messages_that_arrive_early_wait_for_those_sent_before(caplog):
    split, _, _, delivered, loop = _split()

    def numbered(number: int) -> list[bytes]:
        return [b"D", str(number).encode(), number.to_bytes(8, "little")]

    with caplog.at_level(logging.ERROR, logger="danaus.ucx"):
        split.arrived("a", numbered(1))
        split.arrived("a", numbered(2))
        split.arrived("b", numbered(0))
        split.arrived("a", numbered(0))
        split.arrived("a", numbered(1))
        split.arrived("a", [b"D"])
        loop.run_until_complete(asyncio.sleep(0))
    assert delivered == [
        ("b", [b"D", b"0"]),
        ("a", [b"D", b"0"]),
        ("a", [b"D", b"1"]),
        ("a", [b"D", b"2"]),
    ]
    assert "came twice" in caplog.text and "no sequence number" in caplog.text
    loop.close()
