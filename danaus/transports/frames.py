"""Helpers for frames that more than one transport needs."""

from __future__ import annotations

from collections.abc import Sequence

from danaus.core.serialize import Buffer


def copy_frames(frames: Sequence[Buffer]) -> list[Buffer]:
    """Frames the receiver may keep, as a network would hand them over: never the sender's memory.

    Bytes are immutable, so they are shared rather than copied.
    """
    return [f if isinstance(f, bytes) else bytearray(f) for f in frames]
