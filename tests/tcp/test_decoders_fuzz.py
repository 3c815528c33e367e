"""Random and mutated bytes fed to the tcp decoders a peer's bytes reach, before and after it is
authenticated: each either accepts what is within the limits or raises its own error.

Hypothesis runs without a deadline, so no test here depends on the machine's speed.
"""

from __future__ import annotations

import contextlib
import os
import socket
import struct

import pytest
import zmq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from danaus.core import serialize, wire
from danaus.core.settings import Limits
from danaus.transports.tcp import control, memory
from danaus.transports.tcp.buffers import STORAGE_FROM, BufferCache
from danaus.transports.tcp.records import (
    CARRIED_BYTES,
    INLINE_BYTES,
    LEAD_BYTES,
    LENGTH,
    Assembly,
    Cipher,
    RecordError,
    message_records,
)
from danaus.transports.tcp.security import JobKeys
from danaus.transports.tcp.sockets import bind_router

PURE = settings(deadline=None, max_examples=300, suppress_health_check=[HealthCheck.too_slow])
LIVE = settings(deadline=None, max_examples=40, suppress_health_check=[HealthCheck.too_slow])
SECRET = b"k" * 40
LIMIT = 1 << 20


@st.composite
def mutated(draw, valid: bytes) -> bytes:
    """``valid`` with bytes flipped, cut, or extended (or random bytes instead)."""
    choice = draw(st.integers(0, 3))
    if choice == 0:
        return draw(st.binary(max_size=2 * len(valid) + 8))
    data = bytearray(valid)
    if choice == 1 and data:
        for index in draw(st.lists(st.integers(0, len(data) - 1), min_size=1, max_size=8)):
            data[index] ^= draw(st.integers(1, 255))
    elif choice == 2:
        del data[draw(st.integers(0, len(data))) :]
    else:
        data += draw(st.binary(min_size=1, max_size=64))
    return bytes(data)


# ---- tcp, after authentication: records and messages ------------------------------------

frames = st.lists(st.binary(max_size=300), min_size=1, max_size=5)
"""A data-plane message: its frames."""
KEY = bytes(range(32))


def _stream(messages: list[list[bytes]], key: bytes | None, chunk: int) -> bytes:
    """The bytes a connection carries for ``messages``, records sealed with ``key``."""
    cipher = Cipher(key)
    return b"".join(
        bytes(buffer)
        for message in messages
        for record in message_records(message, cipher, chunk)
        for buffer in record
    )


def _records(data: bytes) -> list[tuple[bytes, memoryview]]:
    """``data`` cut into its records (length bytes, body), as far as it holds whole ones."""
    records = []
    at = 0
    while len(data) - at >= LENGTH.size:
        (length,) = LENGTH.unpack_from(data, at)
        body_at = at + LENGTH.size
        if len(data) - body_at < length:
            break
        records.append((data[at:body_at], memoryview(bytearray(data[body_at : body_at + length]))))
        at = body_at + length
    return records


def _assemble(data: bytes, key: bytes | None, max_message: int) -> list[list[bytes]]:
    assembly = Assembly(Cipher(key), 1 << 16, max_message, BufferCache(1 << 20))
    messages = []
    for length, body in _records(data):
        assembly.check_length(body.nbytes)
        whole = assembly.opened(length, body)
        if isinstance(whole, list):  # not None (more to come), nor a Refusal (too large)
            messages.append([bytes(frame) for frame in whole])
    return messages


@PURE
@given(st.lists(frames, min_size=1, max_size=3), st.sampled_from([KEY, None]), st.integers(1, 64))
def test_tcp_records_put_back_together_are_the_messages(messages, key, chunk):
    assert _assemble(_stream(messages, key, chunk), key, LIMIT) == messages


@PURE
@given(st.lists(frames, min_size=1, max_size=3), st.sampled_from([KEY, None]), st.data())
def test_tcp_tampered_records_give_messages_within_the_limits_or_refuse(messages, key, data):
    stream = data.draw(mutated(_stream(messages, key, 16)))
    try:
        arrived = _assemble(stream, key, 512)
    except RecordError:
        return
    assert all(sum(len(frame) for frame in message) <= 512 for message in arrived)
    if key is not None:
        assert arrived == messages[: len(arrived)], "an encrypted record changed and still opened"


def test_tcp_a_record_spanning_two_frames_is_refused():
    """A sender seals each chunk from one frame: a record across frames breaks the protocol."""
    cipher = Cipher(KEY)
    header = b"".join(bytes(b) for b in cipher.seal(struct.pack("<IQQ", 2, 4, 4)))
    across = b"".join(bytes(b) for b in cipher.seal(b"abcdefgh"))
    with pytest.raises(RecordError, match="does not fit the frame"):
        _assemble(header + across, KEY, LIMIT)


@pytest.mark.parametrize("key", [KEY, None], ids=["encrypted", "clear"])
def test_tcp_a_large_bytes_argument_is_received_into_its_own_bytes(key):
    value = os.urandom(STORAGE_FROM)
    frames = serialize.dumps(((value,), {}))
    assembly = Assembly(Cipher(key), 1 << 20, 4 * LIMIT, BufferCache(4 * LIMIT))
    arrived = [
        assembly.opened(length, body)
        for length, body in _records(_stream([[b"k", *frames]], key, 64 * 1024))
    ][-1]
    assert arrived is not None and bytes(arrived[0]) == b"k"
    (received,), _ = serialize.loads(arrived[1:])
    assert received == value
    assert received is arrived[2].obj.owner, "the argument was copied out of its frame"


def test_tcp_a_large_message_is_sealed_chunk_by_chunk_as_it_is_written():
    cipher = Cipher(KEY)
    records = message_records([bytes(1000)], cipher, chunk_bytes=100)
    first = next(records)
    assert sum(memoryview(b).nbytes for b in first) < 100, "the header travels alone"
    assert cipher._number == 1, "no chunk is sealed before it is asked for"
    assert len(list(records)) == 10


def test_tcp_a_large_message_begins_in_lead_records_then_goes_in_whole_chunks():
    chunk, lead = 256 * 1024, 64 * 1024
    message = [b"pickle", os.urandom(LEAD_BYTES + 3 * chunk + 5)]
    records = list(message_records(message, Cipher(KEY), chunk, lead_chunk_bytes=lead))
    sizes = [sum(memoryview(b).nbytes for b in record) - LENGTH.size - 16 for record in records]
    assert sizes[1:] == [*[lead] * (LEAD_BYTES // lead), chunk, chunk, chunk, 5]
    stream = b"".join(bytes(buffer) for record in records for buffer in record)
    assembly = Assembly(Cipher(KEY), chunk + 16, 8 * LIMIT, BufferCache(8 * LIMIT))
    arrived = [assembly.opened(length, body) for length, body in _records(stream)]
    assert [bytes(frame) for frame in arrived[-1]] == message


def test_tcp_a_large_message_s_leading_small_frames_travel_in_its_header_record():
    """A call's kind, envelope and pickle cost no record of their own."""
    chunk = 32 * 1024
    message = [b"k", bytes(50), bytes(67), os.urandom(8 * chunk)]
    records = list(message_records(message, Cipher(KEY), chunk))
    header = _records(b"".join(bytes(buffer) for buffer in records[0]))[0][1]
    plain = bytearray(header.nbytes - 16)
    Cipher(KEY).open_into(records[0][0][: LENGTH.size], header, memoryview(plain))
    assert plain.endswith(b"k" + bytes(117)), "the header's record holds the three small frames"
    assert len(records) == 1 + 8, "then only the large frame's chunks"
    stream = b"".join(bytes(buffer) for record in records for buffer in record)
    assert _assemble(stream, KEY, 4 * LIMIT) == [message]


def test_tcp_no_more_than_carried_bytes_of_frames_travel_with_the_header():
    sizes = [10, CARRIED_BYTES - 30, 100, INLINE_BYTES]
    first = next(message_records([bytes(size) for size in sizes], Cipher(None), 1024 * 1024))
    header_bytes = 4 + 8 * len(sizes)
    assert sum(memoryview(b).nbytes for b in first) == LENGTH.size + header_bytes + sizes[0]


@pytest.mark.parametrize("carried", [b"abc", b"abcdefg"], ids=["within-a-frame", "past-a-frame"])
def test_tcp_a_header_record_carrying_part_of_a_frame_is_refused(carried):
    cipher = Cipher(KEY)
    header = struct.pack("<IQQ", 2, 5, 1 << 20)
    record = b"".join(bytes(b) for b in cipher.seal(header + carried))
    with pytest.raises(RecordError, match="wrong number of bytes"):
        _assemble(record, KEY, 4 * LIMIT)


@PURE
@given(st.binary(max_size=200))
def test_tcp_control_and_memory_decoders_raise_only_value_errors(data: bytes):
    for decode in (control.decode, memory.decode):
        with contextlib.suppress(ValueError):
            decode(data)


@PURE
@given(st.lists(st.binary(max_size=100), max_size=4).flatmap(lambda fs: st.just(fs)))
def test_wire_decoder_raises_only_frame_errors(frames_: list[bytes]):
    with contextlib.suppress(wire.FrameError):
        wire.decode(frames_)


# ---- tcp, before authentication: libzmq's handshake --------------------------------------

GREETING = b"\xff" + bytes(8) + b"\x7f" + bytes([3, 0]) + b"CURVE".ljust(20, b"\0") + bytes(32)


@pytest.fixture(scope="module")
def router():
    ctx = zmq.Context()
    limits = Limits(frame_bytes=1 << 16, handshake_timeout=0.5)
    sock = bind_router(ctx, JobKeys.generate(), "127.0.0.1", limits)
    host, port = sock.last_endpoint.decode().removeprefix("tcp://").rsplit(":", 1)
    yield host, int(port)
    ctx.destroy(linger=0)


def _rss_kib() -> int:
    with open(f"/proc/{os.getpid()}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))


@LIVE
@given(
    greeting=mutated(GREETING),
    command=mutated(b"\x06" + struct.pack(">Q", 1 << 30) + b"\x05HELLO"),
    tail=st.integers(0, 256 * 1024),
)
def test_zmq_handshakes_with_random_bytes_leave_the_proc_bounded(router, greeting, command, tail):
    before = _rss_kib()
    with socket.create_connection(router, timeout=5) as raw, contextlib.suppress(OSError):
        raw.sendall(greeting + command + bytes(tail))
        raw.shutdown(socket.SHUT_WR)
        while raw.recv(65536):
            pass
    assert _rss_kib() - before < 4096
