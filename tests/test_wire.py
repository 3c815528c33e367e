"""The frame codec accepts exactly well-formed messages and rejects the rest with FrameError."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from danaus.core.serialize import dumps, loads
from danaus.core.wire import Call, FrameError, PortRef, Reply, decode, encode
from danaus.transports.tcp import control

CALL = Call("root:3", "train", PortRef("root", 7), 2, ("gpus",), (4,), "root/client", 11)
REPLY = Reply(7, 2, False, "root:3/t[2]", 4)


def test_round_trip():
    for envelope in (CALL, REPLY):
        frames = encode(envelope, dumps({"step": 1}))
        decoded, payload = decode(frames)
        assert decoded == envelope
        assert loads(payload) == {"step": 1}


@pytest.mark.parametrize(
    "frames, reason",
    [
        ([], "empty"),
        ([b"XYZ\x01"], "magic"),
        ([b"DNS\x02" + encode(CALL, [b""])[0][4:], b"x"], "version"),
        ([encode(CALL, [b""])[0]], "no payload"),
        ([encode(CALL, [b""])[0][:-3], b"x"], "bad envelope"),
        ([b"DNS\x01" + b"\x00" * 70_000, b"x"], "exceeds"),
        ([encode(Call("a", "m", None, 5, ("x",), (2,), "s", 0), [b""])[0], b"x"], "point"),
    ],
)
def test_rejections(frames, reason):
    with pytest.raises(FrameError, match=reason):
        decode(frames)


def test_payload_limit():
    with pytest.raises(FrameError, match="exceeds the limit"):
        decode(encode(CALL, [b"x" * 100]), max_bytes=10)


frame = st.binary(max_size=200)


@settings(max_examples=500)
@given(st.lists(frame, max_size=6))
def test_random_frames_only_raise_frame_error(frames):
    with contextlib.suppress(FrameError):
        decode(frames)


@settings(max_examples=500)
@given(st.sampled_from([CALL, REPLY]), st.data())
def test_mutated_frames_only_raise_frame_error(envelope, data):
    header = bytearray(encode(envelope, [b""])[0])
    for _ in range(data.draw(st.integers(1, 4))):
        action = data.draw(st.sampled_from(["flip", "cut", "insert"]))
        position = data.draw(st.integers(0, max(0, len(header) - 1)))
        if action == "flip" and header:
            header[position] ^= data.draw(st.integers(1, 255))
        elif action == "cut":
            del header[position:]
        else:
            header[position:position] = data.draw(st.binary(min_size=1, max_size=8))
    with contextlib.suppress(FrameError):
        decode([bytes(header), b"payload"])


@settings(max_examples=300)
@given(frame)
def test_control_decoder_only_raises_value_error(data):
    with contextlib.suppress(ValueError):
        control.decode(data)
