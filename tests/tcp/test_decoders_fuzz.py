"""Random and mutated bytes fed to the tcp decoders a peer's bytes reach, before and after it is
authenticated: each either accepts what is within the limits or raises its own error.

Hypothesis runs without a deadline, so no test here depends on the machine's speed.
"""

from __future__ import annotations

import contextlib
import os
import socket
import struct

import msgspec
import pytest
import zmq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from danaus.core import wire
from danaus.transports.tcp import control, memory
from danaus.transports.tcp.chunks import LARGE, PART, ChunkError, Reassembly, split
from danaus.transports.tcp.limits import Limits
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


# ---- tcp, after authentication: chunks and messages --------------------------------------

frames = st.lists(st.binary(max_size=300), max_size=5).map(lambda fs: [control.DATA, *fs])
"""A data-plane message: its kind frame, then its frames."""


@st.composite
def chunk_streams(draw) -> list[list[bytes]]:
    """The zmq messages of a few messages split in chunks, some of them tampered with."""
    stream: list[list[bytes]] = []
    for message in draw(st.lists(frames, min_size=1, max_size=3)):
        stream += [[bytes(f) for f in part] for part in split(message, 64)]
    for _ in range(draw(st.integers(0, 3))):
        index = draw(st.integers(0, len(stream)))
        kind = draw(st.sampled_from([LARGE, PART, control.DATA]))
        body = draw(
            st.one_of(
                st.binary(max_size=80),
                st.lists(st.integers(-5, 1 << 40), max_size=4).map(msgspec.msgpack.encode),
            )
        )
        stream.insert(index, [kind, body])
    return stream


@PURE
@given(chunk_streams())
def test_tcp_reassembly_gives_messages_within_the_limits_or_refuses(stream):
    arriving = Reassembly(4096)
    for message in stream:
        try:
            whole = arriving.feed(message)
        except ChunkError:
            continue
        if whole is not None:
            assert sum(memoryview(f).nbytes for f in whole) <= 4096 or len(whole) == len(message)


@PURE
@given(frames)
def test_tcp_chunks_put_back_together_are_the_message(message):
    arriving = Reassembly(LIMIT)
    results = [arriving.feed(part) for part in split(message, 16)]
    assert [bytes(f) for f in results[-1]] == message
    assert all(result is None for result in results[:-1])


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
