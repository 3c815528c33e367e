"""The frame codec accepts exactly well-formed messages and rejects the rest with FrameError."""

from __future__ import annotations

import contextlib

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from danaus.core.serialize import dumps, loads
from danaus.core.wire import (
    MAX_SUBTREE,
    VERSION,
    Ack,
    Call,
    Cast,
    FrameError,
    PortRef,
    Reply,
    decode,
    encode,
    rejected,
)
from danaus.transports.tcp import control

CALL = Call("root:3", "train", PortRef("root", 7), 2, ("gpus",), (4,), "root/client", 11)
REPLY = Reply(7, 2, False, "root:3/t[2]", 4)
PASSED_ON = msgspec.structs.replace(CALL, origin="root")
CAST = Cast(CALL, "root", 5, 2, ("root:1.3", "root:1.0"), (3, 0), (9, 4))
ACK = Ack((5, 6))


def cast(**changes):
    return msgspec.structs.replace(CAST, **changes)


def test_round_trip():
    for envelope in (CALL, PASSED_ON, CAST, ACK, REPLY):
        frames = encode(envelope, dumps({"step": 1}))
        decoded, payload = decode(frames)
        assert decoded == envelope
        assert loads(payload) == {"step": 1}


@pytest.mark.parametrize(
    "frames, reason",
    [
        ([], "empty"),
        ([b"XYZ\x01"], "magic"),
        ([b"DNS" + bytes([VERSION + 1]) + encode(CALL, [b""])[0][4:], b"x"], "version"),
        ([encode(CALL, [b""])[0]], "no payload"),
        ([encode(CALL, [b""])[0][:-3], b"x"], "bad envelope"),
        ([b"DNS" + bytes([VERSION]) + b"\x00" * 70_000, b"x"], "exceeds"),
        ([encode(Call("a", "m", None, 5, ("x",), (2,), "s", 0), [b""])[0], b"x"], "point"),
        ([encode(Call("a", "m", None, 0, ("x",), (2,), "s", -1), [b""])[0], b"x"], ">= 0"),
        ([encode(msgspec.structs.replace(CALL, origin=""), [b""])[0], b"x"], "length >= 1"),
        ([encode(cast(fanout=1), [b""])[0], b"x"], "fan-out"),
        ([encode(cast(fanout=10_000), [b""])[0], b"x"], "fan-out"),
        ([encode(cast(points=(3,)), [b""])[0], b"x"], "disagree"),
        ([encode(cast(points=(3, 4)), [b""])[0], b"x"], "point out of range"),
        ([encode(cast(points=(3, -1)), [b""])[0], b"x"], "point out of range"),
        ([encode(cast(seqs=(9, -4)), [b""])[0], b"x"], ">= 0"),
        ([encode(cast(procs=("root:1.3", "")), [b""])[0], b"x"], "length >= 1"),
        ([encode(cast(origin=""), [b""])[0], b"x"], "length >= 1"),
        ([encode(cast(hop=-5), [b""])[0], b"x"], ">= 0"),
        ([encode(cast(call=cast()), [b""])[0], b"x"], "bad envelope"),
        ([encode(Ack((1, -2)), [b""])[0], b"x"], ">= 0"),
    ],
)
def test_rejections(frames, reason):
    with pytest.raises(FrameError, match=reason):
        decode(frames)


def test_a_cast_names_at_most_max_subtree_procs():
    many = MAX_SUBTREE + 1
    too_long = cast(procs=("p",) * many, points=(0,) * many, seqs=(0,) * many)
    with pytest.raises(FrameError, match="length <= 4096"):
        decode(encode(too_long, [b"x"]))


def test_a_rejected_cast_says_who_waits_and_what_to_acknowledge():
    bad = encode(cast(points=(3, 4)), [b"x"])
    found = rejected(bad, "root:1.1")
    assert found is not None
    assert (found.origin, found.seq, found.hop) == ("root", 11, 5)
    assert found.reply == PortRef("root", 7)
    assert found.points == (2, 3, 4)


def test_a_rejected_call_answers_only_on_its_sender():
    bad = encode(Call("a", "m", PortRef("root", 7), 5, ("x",), (2,), "s", 3), [b"x"])
    found = rejected(bad, "root")
    assert found is not None and found.reply == PortRef("root", 7) and found.seq == 3
    assert found.hop is None and found.points == (5,)
    elsewhere = rejected(bad, "root:1.1")
    assert elsewhere is not None and elsewhere.reply is None and elsewhere.origin == "root:1.1"


def test_a_rejected_call_passed_on_answers_on_its_origin():
    bad = encode(msgspec.structs.replace(PASSED_ON, point=9), [b"x"])
    found = rejected(bad, "root:1.1")
    assert found is not None and found.origin == "root" and found.reply == PortRef("root", 7)


def test_what_is_not_a_call_is_not_read_as_one():
    assert rejected(encode(REPLY, [b"x"]), "root") is None
    assert rejected([b"junk"], "root") is None


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
@given(st.sampled_from([CALL, PASSED_ON, CAST, ACK, REPLY]), st.data())
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
    rejected([bytes(header), b"payload"], "root")


@settings(max_examples=300)
@given(frame)
def test_control_decoder_only_raises_value_error(data):
    with contextlib.suppress(ValueError):
        control.decode(data)
