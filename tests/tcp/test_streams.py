"""The tcp data plane on its own: planes of one loop thread sending to each other and strangers."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import itertools
import logging
import os
import socket
import struct
import threading
import time
import tracemalloc
from collections.abc import Iterator
from typing import Any

import pytest

from danaus.core import serialize
from danaus.core.settings import ENVELOPE_ROOM, Limits, MiB
from danaus.core.transport import ProcLoss
from danaus.transports import challenge
from danaus.transports.tcp import control, ring
from danaus.transports.tcp.buffers import BufferCache, allocate
from danaus.transports.tcp.peers import Peers
from danaus.transports.tcp.records import LENGTH, RING_RECORD
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
        self.breaks: list[tuple[str, str]] = []
        self._changed = threading.Condition()

    def receive(self, src: str, frames: list[Any]) -> None:
        with self._changed:
            self.messages.append((src, [bytes(frame) for frame in frames]))
            self._changed.notify_all()

    def broke(self, peer: str, reason: str) -> None:
        """A peer whose connection broke, and why."""
        with self._changed:
            self.breaks.append((peer, reason))
            self._changed.notify_all()

    def wait_for_break(self, timeout: float = 30) -> tuple[str, str]:
        with self._changed:
            assert self._changed.wait_for(lambda: self.breaks, timeout), "no break reported"
            return self.breaks[0]

    def refused(self, src: str, frames: list[Any], reason: str) -> None:
        """A message refused for its size, kept in its place as ``[b"refused", *frames, why]``."""
        self.receive(src, [b"refused", *frames, reason.encode()])

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
    loop: Loop,
    name: str,
    keys: JobKeys,
    limits: Limits | None = None,
    unreachable: Any = lambda dest: None,
) -> tuple[StreamPlane, Inbox]:
    inbox = Inbox()
    plane: StreamPlane = loop.run(
        StreamPlane,
        name,
        keys,
        "127.0.0.1",
        limits or Limits(),
        loop.loop,
        Peers(),
        inbox.receive,
        lambda dest: None,
        RefusalLog(lambda delay, flush: None),  # these tests count no refusals
        unreachable,
        inbox.refused,
        inbox.broke,
    )
    loop.run(plane.start)
    loop.planes.append(plane)
    return plane, inbox


def introduce(plane: StreamPlane, peer: str, address: str) -> None:
    """Tell ``plane`` where ``peer`` receives data, as its proc's control plane does."""
    plane.peers.learn(peer, control.Address(f"tcp://{peer}:1", address))
    plane.resolved(peer)


def connected(
    loop: Loop, keys: JobKeys, limits: Limits | None = None
) -> tuple[StreamPlane, StreamPlane, Inbox]:
    """Planes ``a`` and ``b``, ``a`` connected to ``b`` (a first message has arrived)."""
    sender, _ = make_plane(loop, "a", keys, limits)
    receiver, inbox = make_plane(loop, "b", keys, limits)
    introduce(sender, "b", receiver.address)
    sender.send("b", [b"hello"])
    inbox.wait_for(1)
    return sender, receiver, inbox


SMALL_RING = 320 * 1024
"""Holds one 256 KiB record at a time: records of large messages mix ring and socket, and wrap."""

RINGS = pytest.mark.parametrize(
    "ring_bytes",
    [
        pytest.param(ring.RING_BYTES, id="ring"),
        pytest.param(SMALL_RING, id="small-ring"),
        pytest.param(0, id="no-ring"),
    ],
)


@contextlib.contextmanager
def loop_held(loop: Loop) -> Iterator[None]:
    """The loop's thread waits (reads nothing) until the block is left."""
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        held.set()
        release.wait()

    loop.loop.call_soon_threadsafe(hold)
    assert held.wait(10)
    try:
        yield
    finally:
        release.set()


def shared(sender: StreamPlane, dest: str) -> ring.Producer | None:
    return sender._outbound[dest]._ring


def rings_taken(receiver: StreamPlane) -> int:
    return sum(i._ring.taken for i in receiver._inbound if i._ring is not None)


@RINGS
@pytest.mark.parametrize("frame_bytes", [64 * 1024, 256 * 1024, 4 * MiB])
@pytest.mark.parametrize("encrypt", [True, False], ids=["encrypted", "clear"])
def test_messages_of_every_size_arrive_whole_and_in_order(
    loop, monkeypatch, encrypt, frame_bytes, ring_bytes
):
    monkeypatch.setattr(ring, "RING_BYTES", ring_bytes)
    keys = JobKeys.generate(encrypt=encrypt)
    limits = Limits(frame_bytes=frame_bytes)
    sender, _ = make_plane(loop, "a", keys, limits)
    receiver, inbox = make_plane(loop, "b", keys, limits)
    introduce(sender, "b", receiver.address)
    sizes = [0, 1, 100, 128 * 1024, 128 * 1024 + 1, 300 * 1024, 9 * MiB + 7, 5]
    sent = [[b"D", os.urandom(size), b"tail"] for size in sizes]
    for message in sent:
        sender.send("b", message)
    arrived = inbox.wait_for(len(sent))
    assert arrived == [("a", message) for message in sent]
    producer = shared(sender, "b")
    if ring_bytes == 0 or not ring.SUPPORTED:
        assert producer is None
        return
    assert producer is not None and producer.size == ring_bytes
    assert producer.placed > 0 and loop.run(rings_taken, receiver) == producer.placed
    if ring_bytes == SMALL_RING and frame_bytes == 64 * 1024:
        # 9 MiB in records of 64 KiB: more than the ring and the socket's buffer hold together
        assert producer.produced > SMALL_RING, "the ring wrapped around"


@pytest.mark.skipif(not ring.SUPPORTED, reason="rings are used on x86-64 only")
@pytest.mark.parametrize("encrypt", [True, False], ids=["encrypted", "clear"])
def test_records_the_ring_has_no_room_for_go_on_the_socket_in_their_place(
    loop, monkeypatch, encrypt
):
    monkeypatch.setattr(ring, "RING_BYTES", SMALL_RING)
    keys = JobKeys.generate(encrypt=encrypt)
    limits = Limits(frame_bytes=64 * 1024)
    sender, receiver, inbox = connected(loop, keys, limits)
    sent = [[b"D", os.urandom(MiB + number)] for number in range(3)]
    producer = shared(sender, "b")
    assert producer is not None
    with loop_held(loop):  # the receiver takes nothing from the ring
        for message in sent:
            sender.send("b", message)
        record = limits.chunk_bytes + (16 if encrypt else 0)
        # Nothing was released: the ring filled up to less than a chunk from its end, no further.
        assert SMALL_RING - record < producer.produced <= SMALL_RING
        while_held = producer.placed
    assert inbox.wait_for(4)[1:] == [("a", message) for message in sent]
    chunks = sum(-(-len(message[1]) // limits.chunk_bytes) + 1 for message in sent)
    assert while_held < chunks, "every record went through the ring"
    assert loop.run(rings_taken, receiver) == producer.placed


@pytest.mark.skipif(not ring.SUPPORTED, reason="rings are used on x86-64 only")
def test_a_ring_record_changed_in_shared_memory_is_rejected_and_the_connection_closed(loop, caplog):
    caplog.set_level(logging.ERROR, "danaus")
    keys = JobKeys.generate()
    sender, receiver, inbox = connected(loop, keys)
    with loop_held(loop):  # the receiver opens nothing yet
        sender.send("b", [os.urandom(MiB)])
        producer = shared(sender, "b")
        assert producer is not None and producer.placed > 0
        producer._data[100] ^= 0x01  # in the first chunk's ciphertext, as the receiver maps it
    deadline = time.monotonic() + 10
    while not any("does not open" in r.getMessage() for r in caplog.records):
        assert time.monotonic() - deadline < 0, "the changed record was not rejected"
        time.sleep(0.02)
    assert loop.run(lambda: [i for i in receiver._inbound if i.peer == "a"]) == []
    time.sleep(0.2)
    assert inbox.messages == [("a", [b"hello"])]


def test_a_peer_on_this_host_is_reached_over_its_unix_socket_else_over_tcp(loop):
    keys = JobKeys.generate()
    sender, _ = make_plane(loop, "a", keys)
    near, near_inbox = make_plane(loop, "near", keys)
    far, far_inbox = make_plane(loop, "far", keys)
    host, port, _ = parse_address(far.address)
    introduce(sender, "near", near.address)
    introduce(sender, "far", f"tcp://{host}:{port},local:danaus-not-on-this-host")
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
    introduce(sender, "b", receiver.address)

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
        Peers(),
        inbox.receive,
        asked.append,
        RefusalLog(lambda delay, flush: None),  # these tests count no refusals
        lambda dest: None,
        inbox.refused,
        inbox.broke,
    )
    loop.planes.append(sender)
    receiver, arrived = make_plane(loop, "b", keys)
    sender.send("b", [b"first"])
    sender.send("b", [b"second"])
    assert asked == ["b"], "the address is asked for once"
    introduce(sender, "b", receiver.address)
    assert [frames for _, frames in arrived.wait_for(2)] == [[b"first"], [b"second"]]


def test_a_peer_that_cannot_be_reached_is_reported_and_its_messages_dropped_once_lost(loop):
    keys = JobKeys.generate()
    unreachable = threading.Event()
    sender, _ = make_plane(loop, "a", keys, unreachable=lambda dest: unreachable.set())
    gone, _ = make_plane(loop, "b", keys)
    loop.run(gone.stop)
    sender.send("b", [b"lost"])
    introduce(sender, "b", gone.address)
    assert unreachable.wait(30), "the refused connection was not reported"
    assert loop.run(sender.unsent)
    sender.peers.lose(ProcLoss("b", "is gone"))
    sender.forget("b")
    assert not loop.run(sender.unsent)


def test_a_send_that_the_peer_cannot_take_yet_returns_at_once(loop):
    keys = JobKeys.generate()
    sender, _, inbox = connected(loop, keys)
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
    introduce(intruder, "b", receiver.address)
    intruder.send("b", [b"let me in"])
    introduce(member, "b", receiver.address)
    member.send("b", [b"member"])
    assert inbox.wait_for(1) == [("a", [b"member"])]
    deadline = time.monotonic() + 10
    while not any("refused" in r.getMessage() for r in caplog.records):
        assert time.monotonic() < deadline, "no refusal logged"
        time.sleep(0.02)
    assert inbox.messages == [("a", [b"member"])]


def test_a_peer_that_fails_the_challenge_is_reported_broken(loop):
    """A listener that does not hold the job's key: its welcome proves nothing."""
    keys = JobKeys.generate()
    sender, inbox = make_plane(loop, "a", keys)
    impostor = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        conn, _ = impostor.accept()
        with conn:
            conn.sendall(challenge.greeting(challenge.Ephemeral()))
            conn.recv(challenge.ANSWER_BYTES, socket.MSG_WAITALL)
            conn.sendall(os.urandom(challenge.WELCOME_BYTES))
            conn.recv(1)

    threading.Thread(target=serve, daemon=True).start()
    port = impostor.getsockname()[1]
    introduce(sender, "b", f"tcp://127.0.0.1:{port},local:elsewhere")
    sender.send("b", [b"secret"])
    try:
        peer, why = inbox.wait_for_break()
    finally:
        impostor.close()
    assert peer == "b" and "failed the challenge" in why


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


@RINGS
@pytest.mark.parametrize("encrypt", [True, False], ids=["encrypted", "clear"])
def test_a_message_over_the_limit_is_refused_unread_and_the_connection_goes_on(
    loop, caplog, monkeypatch, encrypt, ring_bytes
):
    """Its sender is told, in its place, from its leading frames; the next message arrives."""
    monkeypatch.setattr(ring, "RING_BYTES", ring_bytes)
    caplog.set_level(logging.ERROR, "danaus")
    keys = JobKeys.generate(encrypt=encrypt)
    sender, _ = make_plane(loop, "a", keys, Limits(frame_bytes=MiB))
    limits = Limits(max_message_bytes=4 * MiB, frame_bytes=MiB)
    receiver, inbox = make_plane(loop, "b", keys, limits)
    introduce(sender, "b", receiver.address)
    sender.send("b", [b"D", b"envelope", bytes(5 * MiB), b"tail"])
    sender.send("b", [b"D", b"after"])
    (_, refused), after = inbox.wait_for(2)
    assert refused[:3] == [b"refused", b"D", b"envelope"]
    assert refused[3].decode() == (
        f"a message of {5 * MiB + 13} bytes (more than the job's max_message_bytes, "
        f"{4 * MiB}, and {ENVELOPE_ROOM} for its envelope)"
    )
    assert after == ("a", [b"D", b"after"])
    assert any("refused a message from a" in r.getMessage() for r in caplog.records)
    assert loop.run(lambda: [i.peer for i in receiver._inbound]) == ["a"], "one connection"


@WAYS_IN
def test_a_connection_its_receiver_closed_is_reported_broken_not_left_half_open(loop, way):
    """The sender finds out at its next write, drops what is queued, and says so once."""
    keys = JobKeys.generate()
    sender, sender_inbox = make_plane(loop, "a", keys)
    receiver, inbox = make_plane(loop, "b", keys)
    host, port, local = parse_address(receiver.address)
    introduce(sender, "b", f"tcp://{host}:{port},local:{local if way == 'local' else 'elsewhere'}")
    sender.send("b", [b"hello"])
    inbox.wait_for(1)
    loop.run(receiver._close_inbound_from, "a")
    deadline = time.monotonic() + 30
    while not sender_inbox.breaks:
        assert time.monotonic() < deadline, "the broken connection was never reported"
        sender.send("b", [bytes(64 * 1024)])
        time.sleep(0.01)
    sender.send("b", [b"more"])
    loop.run(lambda: None)  # the loop's thread has taken what it had to write
    [(peer, why)] = sender_inbox.breaks
    assert peer == "b" and "its connection broke" in why, "reported once"


def test_a_member_that_breaks_the_protocol_is_reported_broken(loop, caplog):
    caplog.set_level(logging.ERROR, "danaus")
    keys = JobKeys.generate(encrypt=False)
    receiver, inbox = make_plane(loop, "b", keys)
    with _member(receiver.address, keys) as raw:
        raw.sendall(ring.NO_OFFER)
        raw.sendall(LENGTH.pack(4) + struct.pack("<I", 0))  # a message of no frames
        assert _closed_by_peer(raw)
    peer, why = inbox.wait_for_break()
    assert peer == "m" and "breaks the protocol" in why
    assert inbox.messages == []


def test_draining_before_stop_sends_what_waited_for_an_address(loop):
    keys = JobKeys.generate()
    sender, _ = make_plane(loop, "a", keys)
    receiver, inbox = make_plane(loop, "b", keys)
    sender.send("b", [b"last words"])
    draining = asyncio.run_coroutine_threadsafe(sender.drain(timeout=30), loop.loop)
    assert sender.unsent()
    introduce(sender, "b", receiver.address)
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


def test_received_bytes_are_filled_again_only_once_nothing_refers_to_them():
    """A large ``bytes`` argument arrives in storage the connection keeps: the next one of its
    size is received into it, with no new memory, once the program has let go of it."""
    cache = BufferCache(256 * MiB)

    def receive(value: bytes) -> bytes:
        pickle, frame = serialize.dumps(value)
        (storage,) = cache.frames([len(frame)])
        storage[:] = frame
        return serialize.loads([pickle, storage])

    first = receive(b"a" * (4 * MiB))
    assert hash(first) == hash(b"a" * (4 * MiB))
    second = receive(b"b" * (4 * MiB))
    assert first == b"a" * (4 * MiB), "bytes the program holds were filled again"
    del first
    value = b"c" * (4 * MiB)
    tracemalloc.start()
    try:
        third = receive(value)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < MiB, "the free kept bytes were not filled again"
    assert third == b"c" * (4 * MiB) and second == b"b" * (4 * MiB)
    assert hash(third) == hash(b"c" * (4 * MiB)), "the old value's hash was kept"


def test_a_connection_that_sends_small_messages_sets_no_chunk_sized_memory_aside(loop):
    """The buffer where an encrypted connection seals the chunks of large messages (of
    ``chunk_bytes``, 4 MiB by default) is filled only when one is sent: a new mesh's first
    small messages do not zero 4 MiB for each of its connections."""
    tracemalloc.start()
    try:
        sender, _, inbox = connected(loop, JobKeys.generate(encrypt=True))
        loop.run(sender.send, "b", [b"small" * 100])
        inbox.wait_for(2)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < MiB


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


def _member(address: str, keys: JobKeys, way: str = "local") -> socket.socket:
    """A raw connection that passes the challenge as member ``m`` (and sends nothing more)."""
    raw = _connect(address, way)
    greeting = raw.recv(challenge.GREETING_BYTES, socket.MSG_WAITALL)
    own = challenge.Ephemeral()
    answer = challenge.answer(keys.secret, b"m", greeting, own)
    raw.sendall(answer)
    welcome = raw.recv(challenge.WELCOME_BYTES, socket.MSG_WAITALL)
    challenge.check_welcome(keys.secret, welcome, greeting, answer, own)
    return raw


def _memfd(size: int, seals: int) -> int:
    fd = os.memfd_create("danaus-ring", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, size)
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
    return fd


def _memfds() -> int:
    """Descriptors of this process that refer to a memfd (rings among them)."""
    count = 0
    for name in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            count += os.readlink(f"/proc/self/fd/{name}").startswith("/memfd:")
    return count


def _refusals(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]


@pytest.mark.skipif(not ring.SUPPORTED, reason="rings are used on x86-64 only")
@pytest.mark.parametrize(
    "size, seals, reason",
    [
        (ring.HEADER_BYTES + ring.RING_BYTES, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW, "sealed"),
        (ring.HEADER_BYTES + ring.RING_BYTES, ring.SEALS | fcntl.F_SEAL_WRITE, "sealed"),
        (ring.HEADER_BYTES + ring.MAX_RING_BYTES + 4096, ring.SEALS, "bytes"),
    ],
    ids=["missing-seal", "write-sealed", "too-large"],
)
def test_a_member_passing_a_ring_that_breaks_the_rules_is_refused_and_logged(
    loop, caplog, size, seals, reason
):
    caplog.set_level(logging.WARNING, "danaus")
    keys = JobKeys.generate()
    receiver, _ = make_plane(loop, "b", keys)
    fd = _memfd(size, seals)
    try:
        with _member(receiver.address, keys) as raw:
            socket.send_fds(raw, [ring.OFFER], [fd])
            assert _closed_by_peer(raw)
    finally:
        os.close(fd)
    assert any(reason in line for line in _refusals(caplog)), _refusals(caplog)
    assert _memfds() == 0, "the refused ring is still open in the receiver"
    assert loop.run(lambda: set(receiver._inbound)) == set()


@pytest.mark.skipif(not ring.SUPPORTED, reason="rings are used on x86-64 only")
def test_a_ring_passed_before_the_challenge_is_never_taken(loop, caplog):
    caplog.set_level(logging.WARNING, "danaus")
    keys = JobKeys.generate()
    receiver, _ = make_plane(loop, "b", keys)
    fd = _memfd(ring.HEADER_BYTES + ring.RING_BYTES, ring.SEALS)
    try:
        with _connect(receiver.address, "local") as raw:
            raw.recv(challenge.GREETING_BYTES, socket.MSG_WAITALL)
            socket.send_fds(raw, [os.urandom(challenge.ANSWER_BYTES)], [fd])
            assert _closed_by_peer(raw)
        assert _memfds() == 1, "the receiver took a descriptor from a stranger"
    finally:
        os.close(fd)
    assert any("answer to the challenge" in line for line in _refusals(caplog))


@pytest.mark.parametrize("way", ["tcp", "local-without-ring"])
def test_a_ring_record_on_a_connection_that_shares_no_ring_is_rejected(loop, caplog, way):
    caplog.set_level(logging.ERROR, "danaus")
    keys = JobKeys.generate()
    receiver, inbox = make_plane(loop, "b", keys)
    with _member(receiver.address, keys, way.partition("-")[0]) as raw:
        if way != "tcp":
            raw.sendall(ring.NO_OFFER)
        raw.sendall(LENGTH.pack(RING_RECORD | 100))
        assert _closed_by_peer(raw)
    assert any("shares none" in r.getMessage() for r in caplog.records)
    assert inbox.messages == []


@pytest.mark.skipif(not ring.SUPPORTED, reason="rings are used on x86-64 only")
def test_a_message_header_in_the_ring_is_rejected(loop, caplog):
    caplog.set_level(logging.ERROR, "danaus")
    keys = JobKeys.generate(encrypt=False)
    receiver, inbox = make_plane(loop, "b", keys)
    producer, fd = ring.create()
    try:
        with _member(receiver.address, keys) as raw:
            socket.send_fds(raw, [ring.OFFER], [fd])
            os.close(fd)
            slot = producer.slot(12)
            assert slot is not None
            slot[:] = struct.pack("<IQ", 1, 0)  # a message of one empty frame
            del slot
            raw.sendall(LENGTH.pack(RING_RECORD | 12))
            assert _closed_by_peer(raw)
    finally:
        producer.close()
    assert any("header in shared memory" in r.getMessage() for r in caplog.records)
    assert inbox.messages == []


@pytest.mark.skipif(not ring.SUPPORTED, reason="rings are used on x86-64 only")
def test_no_descriptor_is_left_once_the_planes_are_closed():
    def descriptors() -> int:
        return len(os.listdir("/proc/self/fd"))

    before, before_memfds = descriptors(), _memfds()
    running = Loop()
    try:
        keys = JobKeys.generate()
        sender, sender_inbox = make_plane(running, "a", keys)
        receiver, inbox = make_plane(running, "b", keys)
        introduce(sender, "b", receiver.address)
        introduce(receiver, "a", sender.address)
        sender.send("b", [os.urandom(3 * MiB)])
        receiver.send("a", [os.urandom(3 * MiB)])
        inbox.wait_for(1)
        sender_inbox.wait_for(1)
        assert shared(sender, "b") is not None and shared(sender, "b").placed > 0
        assert _memfds() - before_memfds == 4, "two rings, each mapped on both sides"
    finally:
        running.close()
    assert _memfds() == before_memfds
    assert descriptors() == before
