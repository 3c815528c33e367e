"""On the simulator, a mesh's members share what they decode alike, when nothing in it changes."""

from __future__ import annotations

import danaus.sim
from danaus import Actor, endpoint, hosts
from danaus.core import dispatch, spawn_order
from danaus.transports.sim.decoded import KEPT, LARGEST, DecodedOnce


def test_equal_bytes_are_decoded_once_when_the_value_may_be_shared():
    decoded = DecodedOnce()
    calls: list[bytes] = []

    def shareable(frames):
        calls.append(frames[0])
        return frames[0].decode(), True

    assert decoded.decode([b"abc"], shareable) == "abc"
    equal = bytes(bytearray(b"abc"))  # equal bytes, another object
    assert decoded.decode([equal], shareable) == "abc"
    assert decoded.decode([b"abd"], shareable) == "abd"
    assert calls == [b"abc", b"abd"]


def test_values_that_may_change_and_mutable_frames_are_decoded_every_time():
    decoded = DecodedOnce()

    def fresh(frames):
        return [bytes(frames[0])], False

    first = decoded.decode([b"x"], fresh)
    assert decoded.decode([b"x"], fresh) is not first

    def shareable(frames):
        return [bytes(frames[0])], True

    frame = bytearray(b"y")
    first = decoded.decode([frame], shareable)
    frame[:] = b"z"
    assert decoded.decode([frame], shareable) == [b"z"]
    assert first == [b"y"]


def test_large_frames_are_decoded_every_time():
    decoded = DecodedOnce()
    calls = []

    def shareable(frames):
        calls.append(len(frames[0]))
        return len(frames[0]), True

    large = bytes(LARGEST + 1)
    assert decoded.decode([large], shareable) == decoded.decode([large], shareable) == LARGEST + 1
    assert calls == [LARGEST + 1] * 2


def test_only_the_latest_values_are_kept():
    decoded = DecodedOnce()
    calls = []

    def shareable(frames):
        calls.append(frames[0])
        return frames[0], True

    for number in range(KEPT + 1):
        decoded.decode([str(number).encode()], shareable)
    decoded.decode([b"0"], shareable)  # the oldest was dropped: decoded again
    decoded.decode([str(KEPT).encode()], shareable)  # the newest is kept
    assert calls.count(b"0") == 2
    assert calls.count(str(KEPT).encode()) == 1


class Member(Actor):
    def __init__(self, name: str, sizes: tuple[int, ...]) -> None:
        self.name = name

    @endpoint
    def ping(self) -> str:
        return self.name


def _decodes_of_a_mesh(monkeypatch, module, name):
    """The frame counts ``module.name`` decoded, one per call, while a mesh of 16 members on
    2 hosts started and answered once."""
    decodes = []
    real = getattr(module, name)

    def counted(frames):
        decodes.append(len(frames))
        return real(frames)

    monkeypatch.setattr(module, name, counted)

    def main():
        mesh = hosts().spawn_procs({"gpus": 8}).spawn("member", Member, "m", (1, 2))
        return list(mesh.ping.call().get().values())

    assert danaus.sim.run(main, hosts=2, seed=0).value == ["m"] * 16
    return decodes


def test_a_mesh_decodes_its_class_and_unchangeable_arguments_once(monkeypatch):
    assert _decodes_of_a_mesh(monkeypatch, spawn_order, "loads") == [1]


def test_a_mesh_decodes_its_spawn_order_once(monkeypatch):
    assert _decodes_of_a_mesh(monkeypatch, dispatch, "_unchanging") == [1]
