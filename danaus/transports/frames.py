"""Helpers for frames that more than one transport needs."""

from __future__ import annotations

from collections.abc import Sequence

from danaus.core.serialize import Buffer


def copy_frames(frames: Sequence[Buffer]) -> list[Buffer]:
    """Frames the receiver may keep, as a network would hand them over: never the sender's memory.

    Bytes are immutable, so they are shared rather than copied.
    """
    # A loop, not a comprehension: before Python 3.12 that is a call of its own, which
    # for a message's two or three frames costs about what the copying does.
    copied: list[Buffer] = []
    for frame in frames:
        copied.append(frame if isinstance(frame, bytes) else bytearray(frame))
    return copied
