"""On UCX's own plane, a message over the limit is refused without being read, its sender is
told in its place, and the connection goes on."""

from __future__ import annotations

import os
import queue
from typing import Any

import pytest

pytest.importorskip("ucxx")

from danaus.core.settings import Limits, MiB
from danaus.transports.tcp.control import DATA
from danaus.transports.tcp.refusals import RefusalLog
from danaus.transports.ucx.plane import UcxPlane

SECRET = os.urandom(32)


class Side:
    """A UCX plane of its own, and what reached it."""

    def __init__(self, name: str, limits: Limits) -> None:
        self.arrived: queue.Queue[tuple[str, Any]] = queue.Queue()
        self.plane = UcxPlane(
            name,
            SECRET,
            "127.0.0.1",
            limits,
            RefusalLog(lambda delay, flush: None),  # these tests count no refusals
            lambda src, frames: self.arrived.put((src, [bytes(f) for f in frames])),
            lambda src, frames, why: self.arrived.put((src, ("refused", *map(bytes, frames), why))),
            lambda peer, why: self.arrived.put((peer, ("broken", why))),
        )

    def next(self) -> tuple[str, Any]:
        return self.arrived.get(timeout=30)


def test_a_message_over_the_limit_is_refused_unread_and_the_connection_goes_on():
    sender = Side("a", Limits())
    receiver = Side("b", Limits(max_message_bytes=4 * MiB))
    try:
        sender.plane.resolved("b", receiver.plane.listening().result(30))
        number = (7).to_bytes(8, "little")
        sender.plane.send("b", [DATA, b"before"])
        sender.plane.send("b", [DATA, number, b"envelope", os.urandom(5 * MiB), b"tail"])
        sender.plane.send("b", [DATA, b"after"])
        assert receiver.next() == ("a", [DATA, b"before"])
        src, refused = receiver.next()
        assert (src, refused[:4]) == ("a", ("refused", DATA, number, b"envelope"))
        assert refused[4].startswith(f"a message of {5 * MiB + 21} bytes (more than the job's")
        assert receiver.next() == ("a", [DATA, b"after"])
    finally:
        sender.plane.stop()
        receiver.plane.stop()
