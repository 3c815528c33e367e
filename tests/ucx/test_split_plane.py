"""Small messages on TCP and large ones on UCX still reach each actor in the order sent."""

from __future__ import annotations

import asyncio
import logging
import os
from concurrent.futures import Future
from typing import Any

import pytest

pytest.importorskip("ucxx")

import danaus
from danaus import Actor, endpoint, this_host
from danaus.transports.tcp.control import DATA
from danaus.transports.tcp.memory import MEMORY
from danaus.transports.ucx.fabric import BulkRoutes
from danaus.transports.ucx.split import (
    ASK,
    AT,
    HERE,
    LARGE_BYTES,
    NONE,
    NUMBERED,
    OWN_KINDS,
    SplitPlane,
)
from tests.tcp.conftest import wait_until
from tests.ucx.probe import Probe


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


@pytest.fixture
def ucx_on_this_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """Large messages between this host's procs over UCX, as between hosts."""
    monkeypatch.setenv("DANAUS_UCX_BULK", "ucx")


def test_large_and_small_messages_of_one_sender_arrive_in_order(ucx_on_this_host):
    danaus.configure(transport="ucx")
    try:
        procs = this_host().spawn_procs({"w": 2})
        recorder = procs.slice(w=1).spawn("recorder", Recorder)
        sender = procs.slice(w=0).spawn("sender", Sender)
        sent, taken = sender.send_mixed.call_one(recorder, 30).get(timeout=60)
        assert [tuple(pair) for pair in taken] == [tuple(pair) for pair in sent]
    finally:
        danaus.shutdown()


def test_ucx_starts_in_a_proc_only_once_it_has_bulk_to_move(ucx_on_this_host):
    danaus.configure(transport="ucx")
    try:
        probes = this_host().spawn_procs({"w": 2}).spawn("probes", Probe)
        assert list(probes.take.call(b"small").get(timeout=60).values()) == [5, 5]
        assert list(probes.ucx_started.call().get(timeout=60).values()) == [False, False]
        receiver = probes.slice(w=1)
        for _ in range(2):
            assert receiver.take.call_one(bytes(LARGE_BYTES)).get(timeout=60) == LARGE_BYTES
        wait_until(lambda: receiver.ucx_started.call_one().get(timeout=60), 30, "UCX started")
        assert probes.slice(w=0).ucx_started.call_one().get(timeout=60) is False
    finally:
        danaus.shutdown()


def test_large_messages_between_procs_of_one_host_stay_on_their_unix_socket():
    danaus.configure(transport="ucx")
    try:
        probes = this_host().spawn_procs({"w": 2}).spawn("probes", Probe)
        receiver = probes.slice(w=1)
        for _ in range(2):  # the question about UCX, after the first, is answered before this
            assert receiver.take.call_one(bytes(LARGE_BYTES)).get(timeout=60) == LARGE_BYTES
        assert list(probes.ucx_started.call().get(timeout=60).values()) == [False, False]
    finally:
        danaus.shutdown()


class _Plane:
    """A plane that keeps what it is given; as UCX, it listens at ``here:1`` at once.

    As the stream plane, it is connected over its Unix socket to the procs in ``local``.
    """

    address = "here:1"

    def __init__(self) -> None:
        self.sent: list[tuple[str, list[bytes]]] = []
        self.resolved_to: dict[str, str] = {}
        self.local: set[str] = set()

    def on_this_host(self, peer: str) -> bool:
        return peer in self.local

    def send(self, dest: str, message: list[bytes]) -> None:
        self.sent.append((dest, message))

    def resolved(self, dest: str, address: str) -> None:
        self.resolved_to[dest] = address

    def listening(self) -> Future[str]:
        found: Future[str] = Future()
        found.set_result(self.address)
        return found


OVER_RDMA = BulkRoutes(on_this_host=False, between_hosts=True, why="")
"""The routes of a proc with an RDMA device, by default."""


def _split(
    start_large: Any = None, routes: BulkRoutes = OVER_RDMA
) -> tuple[SplitPlane, _Plane, _Plane, list[tuple[str, list[bytes]]], asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    delivered: list[tuple[str, list[bytes]]] = []
    small, large = _Plane(), _Plane()
    split = SplitPlane(
        "p",
        small,  # type: ignore[arg-type]
        start_large or (lambda: large),
        loop,
        lambda src, frames: delivered.append((src, frames)),
        lambda src, frames, reason: delivered.append((src, [b"refused", *frames, reason])),
        routes,
    )
    return split, small, large, delivered, loop


def _number(message: list[bytes]) -> int:
    return int.from_bytes(message[1], "little")


LARGE = [b"D", bytes(LARGE_BYTES)]


def test_large_messages_go_on_tcp_until_the_peer_says_where_it_listens_on_ucx():
    split, small, large, _, loop = _split()
    split.send("b", [b"D", b"x"])
    split.send("b", LARGE)
    split.send("b", LARGE)
    assert small.sent == [("b", [b"D", b"x"]), ("b", LARGE), ("b", [ASK]), ("b", LARGE)], (
        "one question, after the first large message; nothing numbered before the answer"
    )
    split.arrived_on_loop("b", [AT, b"10.0.0.2:4000"])
    assert large.resolved_to == {"b": "10.0.0.2:4000"}
    assert small.sent[-1] == ("b", [NUMBERED]), "the mark, before anything goes on UCX"
    split.send("b", LARGE)
    split.send("b", [b"D", b"y"])
    split.send("c", [b"D", b"z"])
    assert [(dest, _number(m)) for dest, m in large.sent] == [("b", 0)]
    assert small.sent[-2:] == [("b", [b"D", (1).to_bytes(8, "little"), b"y"]), ("c", [b"D", b"z"])]
    loop.close()


def test_an_answer_nobody_asked_for_changes_nothing():
    split, small, large, _, loop = _split()
    split.arrived_on_loop("b", [AT, b"10.0.0.2:4000"])
    split.arrived_on_loop("b", [AT, b"10.0.0.2:4000"])
    split.send("b", LARGE)
    split.arrived_on_loop("b", [AT, b"10.0.0.2:4000"])
    split.arrived_on_loop("b", [AT, b"10.0.0.2:4000"])
    split.send("b", LARGE)
    assert small.sent == [("b", LARGE), ("b", [ASK]), ("b", [NUMBERED])], "one mark"
    assert [_number(m) for _, m in large.sent] == [0]
    loop.close()


def test_a_peer_without_ucx_gets_its_large_messages_on_tcp_and_no_more_questions(caplog):
    split, small, large, _, loop = _split()
    split.send("b", LARGE)
    with caplog.at_level(logging.INFO, logger="danaus.ucx"):
        split.arrived_on_loop("b", [NONE, b"no UCX here"])
    split.send("b", LARGE)
    assert small.sent == [("b", LARGE), ("b", [ASK]), ("b", LARGE)], "never numbered"
    assert large.sent == [] and "no UCX here" in caplog.text
    loop.close()


def test_a_question_starts_ucx_and_is_answered_with_where_it_listens():
    started: list[_Plane] = []

    def start() -> _Plane:
        started.append(_Plane())
        return started[-1]

    split, small, _, delivered, loop = _split(start)
    assert started == [], "nothing starts UCX before it is needed"
    split.arrived_on_loop("a", [ASK])
    split.arrived_on_loop("c", [ASK])
    assert len(started) == 1
    assert small.sent == [("a", [AT, b"here:1"]), ("c", [AT, b"here:1"])]
    assert delivered == [], "questions never reach the runtime"
    loop.close()


def test_a_question_from_this_host_is_answered_without_starting_ucx(caplog):
    def start() -> _Plane:
        raise AssertionError("UCX started")

    answerer, answerer_small, _, _, answerer_loop = _split(start)
    answerer_small.local.add("a")
    answerer.arrived_on_loop("a", [ASK])
    assert answerer_small.sent == [("a", [HERE])]
    answerer_loop.close()

    split, small, large, _, loop = _split()
    split.send("b", LARGE)
    with caplog.at_level(logging.INFO, logger="danaus.ucx"):
        split.arrived_on_loop("b", [HERE])
    split.send("b", LARGE)
    assert small.sent == [("b", LARGE), ("b", [ASK]), ("b", LARGE)], (
        "no more questions, and large messages stay on TCP, never numbered"
    )
    assert large.sent == [] and caplog.text == ""
    loop.close()


def test_bulk_over_ucx_everywhere_answers_a_question_from_this_host_with_the_address():
    split, small, _, _, loop = _split(routes=BulkRoutes(True, True, ""))
    small.local.add("a")
    split.arrived_on_loop("a", [ASK])
    assert small.sent == [("a", [AT, b"here:1"])]
    loop.close()


WITHOUT_RDMA = BulkRoutes(on_this_host=False, between_hosts=False, why="no RDMA device")


def test_a_proc_without_an_rdma_device_keeps_large_messages_on_tcp_and_never_asks():
    def start() -> _Plane:
        raise AssertionError("UCX started")

    split, small, _, _, loop = _split(start, WITHOUT_RDMA)
    split.send("b", LARGE)
    split.send("b", LARGE)
    assert small.sent == [("b", LARGE), ("b", LARGE)], "as sent: no number, no question"
    loop.close()


def test_without_an_rdma_device_a_question_from_another_host_is_answered_with_why():
    def start() -> _Plane:
        raise AssertionError("UCX started")

    split, small, _, _, loop = _split(start, WITHOUT_RDMA)
    split.arrived_on_loop("a", [ASK])
    assert small.sent == [("a", [NONE, b"no RDMA device"])]
    loop.close()


def test_where_ucx_cannot_start_a_question_is_answered_with_why():
    def start() -> _Plane:
        raise OSError("no UCX library")

    split, small, _, _, loop = _split(start)
    split.arrived_on_loop("a", [ASK])
    split.send("a", LARGE)
    [(dest, (marker, why)), (_, large_message)] = small.sent
    assert (dest, marker) == ("a", NONE) and b"no UCX library" in why
    assert large_message == LARGE, "large messages from here go on TCP, unasked"
    loop.close()


def test_the_split_planes_own_kinds_are_never_the_transports():
    assert not OWN_KINDS & {DATA, MEMORY}


def numbered(number: int) -> list[bytes]:
    return [b"D", number.to_bytes(8, "little"), str(number).encode()]


def test_messages_that_arrive_early_wait_for_those_sent_before(caplog):
    split, _, _, delivered, loop = _split()

    with caplog.at_level(logging.ERROR, logger="danaus.ucx"):
        split.arrived_on_loop("b", [NUMBERED])
        split.arrived("a", numbered(1))  # on UCX, before a's mark
        split.arrived("a", numbered(2))
        split.arrived("b", numbered(0))
        split.arrived_on_loop("a", [NUMBERED])
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


def test_a_message_from_the_stream_plane_in_order_is_handed_on_at_once():
    split, _, _, delivered, loop = _split()
    split.arrived_on_loop("a", [NUMBERED])
    split.arrived_on_loop("a", numbered(0))
    assert delivered == [("a", [b"D", b"0"])]
    split.arrived_on_loop("a", numbered(2))
    assert len(delivered) == 1
    split.arrived_on_loop("a", numbered(1))
    assert delivered[1:] == [("a", [b"D", b"1"]), ("a", [b"D", b"2"])]
    loop.close()


def test_a_message_from_the_stream_plane_waits_for_one_from_ucx_still_queued():
    split, _, _, delivered, loop = _split()
    split.arrived_on_loop("a", [NUMBERED])
    split.arrived_on_loop("b", [NUMBERED])
    split.arrived("a", numbered(0))  # from UCX's thread: queued for the loop's next turn
    split.arrived_on_loop("a", numbered(1))
    split.arrived_on_loop("b", numbered(0))
    loop.run_until_complete(asyncio.sleep(0))
    assert delivered == [("a", [b"D", b"0"]), ("a", [b"D", b"1"]), ("b", [b"D", b"0"])]
    loop.close()


def test_before_the_mark_messages_pass_through_whole_whatever_their_second_frame():
    split, _, _, delivered, loop = _split()
    looks_numbered = [b"D", (0).to_bytes(8, "little")]
    split.arrived_on_loop("a", looks_numbered)
    split.arrived_on_loop("a", [b"D", b"x"])
    assert delivered == [("a", looks_numbered), ("a", [b"D", b"x"])]
    loop.close()


def test_the_mark_divides_a_senders_messages_and_those_on_ucx_wait_for_it():
    split, _, _, delivered, loop = _split()
    split.arrived_on_loop("a", [b"D", b"before"])
    split.arrived("a", numbered(0))  # on UCX, sent after the mark, arrived before it
    loop.run_until_complete(asyncio.sleep(0))
    assert delivered == [("a", [b"D", b"before"])]
    split.arrived_on_loop("a", [NUMBERED])
    split.arrived_on_loop("a", numbered(1))
    loop.run_until_complete(asyncio.sleep(0))
    assert delivered == [("a", [b"D", b"before"]), ("a", [b"D", b"0"]), ("a", [b"D", b"1"])]
    loop.close()


def test_malformed_messages_are_rejected_and_logged_and_the_order_holds(caplog):
    split, small, _, delivered, loop = _split()
    with caplog.at_level(logging.ERROR, logger="danaus.ucx"):
        split.arrived_on_loop("a", [ASK, b"more"])
        split.arrived_on_loop("a", [NUMBERED, b"more"])
        split.arrived_on_loop("a", [b"D", b"unnumbered"])
        split.arrived_on_loop("a", [NUMBERED])
        split.arrived_on_loop("a", [b"D", b"unnumbered"])  # after the mark: a number is due
        split.arrived_on_loop("a", numbered(0))
        split.arrived_on_loop("a", [NUMBERED])  # a second mark starts nothing over
        split.arrived_on_loop("a", numbered(0))
        split.arrived_on_loop("a", numbered(1))
    assert delivered == [("a", [b"D", b"unnumbered"]), ("a", [b"D", b"0"]), ("a", [b"D", b"1"])]
    assert small.sent == [], "no question asked, none answered"
    assert caplog.text.count("malformed") == 2
    assert "no sequence number" in caplog.text and "second mark" in caplog.text
    assert "came twice" in caplog.text
    loop.close()


def test_messages_of_both_planes_arrive_in_the_order_sent_whichever_plane_is_faster():
    """A sender and a receiver wired together; what UCX carries always arrives first."""
    sender, out_small, out_large, _, sender_loop = _split()
    receiver, back_small, _, delivered, loop = _split()

    def carry() -> None:
        on_ucx, out_large.sent[:] = out_large.sent[:], []
        on_tcp, out_small.sent[:] = out_small.sent[:], []
        back, back_small.sent[:] = back_small.sent[:], []
        for _, message in on_ucx:
            receiver.arrived("a", message)
        for _, message in on_tcp:
            receiver.arrived_on_loop("a", message)
        for _, message in back:
            sender.arrived_on_loop("b", message)
        loop.run_until_complete(asyncio.sleep(0))

    sent = []
    for index in range(12):
        payload = bytes(LARGE_BYTES) if index % 3 == 0 else b"small"
        message = [b"D", index.to_bytes(2, "little"), payload]
        sender.send("b", message)
        sent.append(message)
        if index in (0, 1, 6):
            carry()  # the question, its answer, the mark; then UCX overtakes the stream plane
    carry()
    assert [message for _, message in delivered] == sent
    assert len(out_large.resolved_to) == 1
    sender_loop.close()
    loop.close()
