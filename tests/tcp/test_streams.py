"""The tcp data plane on its own: planes of one loop thread sending to each other and strangers."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from danaus.transports import challenge
from danaus.transports.tcp.buffers import BufferCache, allocate
from danaus.transports.tcp.limits import Limits, MiB
from danaus.transports.tcp.refusals import RefusalLog
from danaus.transports.tcp.security import JobKeys
from danaus.transports.tcp.streams import StreamPlane, parse_address

pytestmark = pytest.mark.timeout(60)


class Loop:
    """An event loop on a thread of its own, as a proc's runtime loop."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.planes: list[StreamPlane] = []

    def run(self, fn: Any, *args: Any) -> Any:
        async def call() -> Any:
            return fn(*args)

        return asyncio.run_coroutine_threadsafe(call(), self.loop).result(10)

    def close(self) -> None:
        for plane in self.planes:
            self.run(plane.stop)

        async def settle() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(settle(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


class Inbox:
    """What a plane received, waited on by the test."""

    def __init__(self) -> None:
        self.messages: list[tuple[str, list[bytes]]] = []
        self._changed = threading.Condition()

    def receive(self, src: str, frames: list[Any]) -> None:
        with self._changed:
            self.messages.append((src, [bytes(frame) for frame in frames]))
            self._changed.notify_all()

    def wait_for(self, count: int, timeout: float = 30) -> list[tuple[str, list[bytes]]]:
        with self._changed:
            assert self._changed.wait_for(lambda: len(self.messages) >= count, timeout), (
                f"{len(self.messages)} of {count} messages arrived"
            )
            return list(self.messages)


@pytest.fixture
def loop() -> Iterator[Loop]:
    running = Loop()
    yield running
    running.close()


def make_plane(
    loop: Loop, name: str, keys: JobKeys, limits: Limits | None = None
) -> tuple[StreamPlane, Inbox]:
    inbox = Inbox()
    plane: StreamPlane = loop.run(
        StreamPlane,
        name,
        keys,
        "127.0.0.1",
        limits or Limits(),
        loop.loop,
        inbox.receive,
        lambda dest: None,
        RefusalLog(),
    )
    loop.run(plane.start)
    loop.planes.append(plane)
    return plane, inbox


@pytest.mark.parametrize("frame_bytes", [64 * 1024, 256 * 1024, 4 * MiB])
@pytest.mark.parametrize("encrypt", [True, False], ids=["encrypted", "clear"])
def test_messages_of_every_size_arrive_whole_and_in_order(loop, encrypt, frame_bytes):
    keys = JobKeys.generate(encrypt=encrypt)
    limits = Limits(frame_bytes=frame_bytes)
    sender, _ = make_plane(loop, "a", keys, limits)
    receiver, inbox = make_plane(loop, "b", keys, limits)
    sender.resolved("b", receiver.address)
    sizes = [0, 1, 100, 128 * 1024, 128 * 1024 + 1, 300 * 1024, 9 * MiB + 7, 5]
    sent = [[b"D", os.urandom(size), b"tail"] for size in sizes]
    for message in sent:
        sender.send("b", message)
    arrived = inbox.wait_for(len(sent))
    assert arrived == [("a", message) for message in sent]


def test_a_peer_on_this_host_is_reached_over_its_unix_socket_else_over_tcp(loop):
    keys = JobKeys.generate()
    sender, _ = make_plane(loop, "a", keys)
    near, near_inbox = make_plane(loop, "near", keys)
    far, far_inbox = make_plane(loop, "far", keys)
    host, port, _ = parse_address(far.address)
    sender.resolved("near", near.address)
    sender.resolved("far", f"tcp://{host}:{port},local:danaus-not-on-this-host")
    sender.send("near", [b"to near"])
    sender.send("far", [b"to far"])
    assert near_inbox.wait_for(1) == [("a", [b"to near"])]
    assert far_inbox.wait_for(1) == [("a", [b"to far"])]
    families = {dest: connection._sock.family for dest, connection in sender._outbound.items()}
    assert families == {"near": socket.AF_UNIX, "far": socket.AF_INET}


def test_each_thread_sending_to_a_peer_keeps_its_order(loop):
    keys = JobKeys.generate()
    sender, _ = make_plane(loop, "a", keys)
    receiver, inbox = make_plane(loop, "b", keys)
    sender.resolved("b", receiver.address)

    def send_from(thread: int) -> None:
        for number in range(300):
            sender.send("b", [f"{thread}".encode(), number.to_bytes(4, "little")])

    threads = [threading.Thread(target=send_from, args=(t,)) for t in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    arrived = inbox.wait_for(1200)
    for thread in range(4):
        numbers = [
            int.from_bytes(f[1], "little") for _, f in arrived if f[0] == f"{thread}".encode()
        ]
        assert numbers == list(range(300))


def test_messages_sent_before_the_address_is_known_go_out_once_it_is(loop):
    keys = JobKeys.generate()
    asked: list[str] = []
    inbox = Inbox()
    sender: StreamPlane = loop.run(
        StreamPlane,
        "a",
        keys,
        "127.0.0.1",
        Limits(),
        loop.loop,
        inbox.receive,
        asked.append,
        RefusalLog(),
    )
    loop.planes.append(sender)
    receiver, arrived = make_plane(loop, "b", keys)
    sender.send("b", [b"first"])
    sender.send("b", [b"second"])
    assert asked == ["b"], "the address is asked for once"
    sender.resolved("b", receiver.address)
    assert [frames for _, frames in arrived.wait_for(2)] == [[b"first"], [b"second"]]


def test_a_send_that_the_peer_cannot_take_yet_returns_at_once(loop):
    keys = JobKeys.generate()
    sender, _ = make_plane(loop, "a", keys)
    receiver, inbox = make_plane(loop, "b", keys)
    sender.resolved("b", receiver.address)
    sender.send("b", [b"hello"])
    inbox.wait_for(1)
    blocked = threading.Event()
    loop.loop.call_soon_threadsafe(blocked.wait)  # the loop stops reading until set
    started = time.monotonic()
    for _ in range(8):
        sender.send("b", [bytes(8 * MiB)])
    assert time.monotonic() - started < 5, "sending waited for the receiver"
    blocked.set()
    assert len(inbox.wait_for(9)) == 9


def test_a_peer_with_another_key_is_refused_and_logged(loop, caplog):
    caplog.set_level(logging.WARNING, "danaus")
    receiver, inbox = make_plane(loop, "b", JobKeys.generate())
    intruder, _ = make_plane(loop, "x", JobKeys.generate())
    member, _ = make_plane(loop, "a", JobKeys(receiver.keys.public, receiver.keys.secret))
    intruder.resolved("b", receiver.address)
    intruder.send("b", [b"let me in"])
    member.resolved("b", receiver.address)
    member.send("b", [b"member"])
    assert inbox.wait_for(1) == [("a", [b"member"])]
    deadline = time.monotonic() + 10
    while not any("refused" in r.getMessage() for r in caplog.records):
        assert time.monotonic() < deadline, "no refusal logged"
        time.sleep(0.02)
    assert inbox.messages == [("a", [b"member"])]


def _connect(address: str, way: str = "tcp") -> socket.socket:
    """A raw connection to a plane's TCP socket, or (``way="local"``) its Unix socket."""
    host, port, local = parse_address(address)
    if way == "tcp":
        return socket.create_connection((host, port), timeout=10)
    raw = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    raw.settimeout(10)
    raw.connect(f"\0{local}")
    return raw


WAYS_IN = pytest.mark.parametrize("way", ["tcp", "local"])


def _closed_by_peer(raw: socket.socket) -> bool:
    try:
        while raw.recv(65536):
            pass
    except ConnectionResetError:
        pass
    return True


@WAYS_IN
def test_a_stranger_gets_a_greeting_and_is_closed_after_a_wrong_answer(loop, way):
    receiver, inbox = make_plane(loop, "b", JobKeys.generate())
    with _connect(receiver.address, way) as raw:
        greeting = raw.recv(challenge.GREETING_BYTES)
        assert greeting.startswith(challenge.MAGIC)
        with contextlib.suppress(OSError):
            raw.sendall(os.urandom(challenge.ANSWER_BYTES) + bytes(4 * MiB))
        assert _closed_by_peer(raw)
    assert inbox.messages == []


@WAYS_IN
def test_a_silent_stranger_is_closed_at_the_handshake_timeout(loop, way):
    receiver, _ = make_plane(loop, "b", JobKeys.generate(), Limits(handshake_timeout=0.3))
    with _connect(receiver.address, way) as raw:
        started = time.monotonic()
        raw.recv(challenge.GREETING_BYTES)
        assert _closed_by_peer(raw)
        assert time.monotonic() - started < 5


@WAYS_IN
def test_strangers_beyond_the_pending_limit_are_refused_at_once(loop, way):
    limits = Limits(max_pending_handshakes=2, handshake_timeout=30)
    receiver, _ = make_plane(loop, "b", JobKeys.generate(), limits)
    held = [_connect(receiver.address, way) for _ in range(2)]
    for raw in held:
        raw.recv(challenge.GREETING_BYTES)
    with _connect(receiver.address, way) as extra:
        assert extra.recv(challenge.GREETING_BYTES) == b"", "the third was not closed at once"
    for raw in held:
        raw.close()


def test_a_member_announcing_a_message_over_the_limit_is_cut_off_before_it_is_allocated(
    loop, caplog
):
    caplog.set_level(logging.ERROR, "danaus")
    keys = JobKeys.generate()
    limits = Limits(max_message_bytes=4 * MiB, frame_bytes=MiB)
    sender, _ = make_plane(loop, "a", keys, Limits())
    receiver, inbox = make_plane(loop, "b", keys, limits)
    sender.resolved("b", receiver.address)
    sender.send("b", [bytes(5 * MiB)])
    deadline = time.monotonic() + 10
    while not any("max_message_bytes" in r.getMessage() for r in caplog.records):
        assert time.monotonic() < deadline, "the oversized message was not refused"
        time.sleep(0.02)
    assert inbox.messages == []


def test_draining_before_stop_sends_what_waited_for_an_address(loop):
    keys = JobKeys.generate()
    sender, _ = make_plane(loop, "a", keys)
    receiver, inbox = make_plane(loop, "b", keys)
    sender.send("b", [b"last words"])
    draining = asyncio.run_coroutine_threadsafe(sender.drain(timeout=30), loop.loop)
    assert sender.unsent()
    sender.resolved("b", receiver.address)
    draining.result(30)
    assert not sender.unsent()
    loop.run(sender.stop)
    assert inbox.wait_for(1) == [("a", [b"last words"])]


def test_a_kept_buffer_is_filled_again_only_once_nothing_refers_to_it():
    cache = BufferCache(256 * MiB)
    first = cache.allocate(64 * MiB)
    buffer = id(first.obj)  # the cache keeps it alive: the id stays its own
    assert id(cache.allocate(64 * MiB).obj) != buffer, "a buffer still in view was reused"
    array = memoryview(first[:100]).cast("B")
    del first
    assert id(cache.allocate(64 * MiB).obj) != buffer, "a buffer an array holds was reused"
    del array
    assert id(cache.allocate(64 * MiB).obj) == buffer
    assert cache.allocate(300 * MiB).nbytes == 300 * MiB
    assert cache.allocate(10).nbytes == 10


def test_other_threads_run_while_a_large_buffer_is_mapped():
    """Populating 1 GiB takes the kernel a good part of a second: never with the GIL held."""
    stamps: list[float] = []
    done = threading.Event()

    def spin() -> None:
        while not done.is_set():
            stamps.append(time.monotonic())

    spinner = threading.Thread(target=spin)
    spinner.start()
    try:
        started = time.monotonic()
        buffer = allocate(1024 * MiB)
        ended = time.monotonic()
    finally:
        done.set()
        spinner.join()
    during = [started, *(stamp for stamp in stamps if started < stamp < ended), ended]
    longest_gap = max(later - earlier for earlier, later in itertools.pairwise(during))
    assert buffer.nbytes == 1024 * MiB and buffer[-1] == 0
    assert longest_gap < (ended - started) / 2, "the spinning thread was held up throughout"
