"""Large messages on the zmq data plane: sent as bounded chunks, put back together on arrival.

Every zmq frame is at most ``frame_bytes`` (the sockets refuse larger ones), so
a message with a larger frame travels as a ``LARGE`` message giving the size
of each of its frames, then one ``PART`` message per chunk of at most
``chunk_bytes``, in order. The sender's chunks are views of its own buffers (no
copy); the receiver checks the sizes against ``max_message_bytes`` before it
allocates the frames, then copies each chunk into place. Bounded chunks also
keep the I/O threads fair: no single frame occupies one for long (CURVE
encrypts each frame whole).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from danaus.core import wire
from danaus.transports.tcp.buffers import allocate

LARGE = b"L"
PART = b"P"
MAX_FRAMES = 1 + wire.MAX_FRAMES
"""A kind frame, then at most what the wire allows."""

_layout = msgspec.msgpack.Decoder(list[int])


class ChunkError(ValueError):
    """Chunks that do not add up to the message they announced."""


def split(message: Sequence[Any], chunk_bytes: int) -> list[list[Any]]:
    """The zmq messages that carry ``message`` (a kind frame, then its frames), in order."""
    views = [memoryview(frame).cast("B") for frame in message]
    if all(view.nbytes <= chunk_bytes for view in views):
        return [list(message)]
    parts: list[list[Any]] = [[LARGE, msgspec.msgpack.encode([view.nbytes for view in views])]]
    for view in views:
        for start in range(0, view.nbytes, chunk_bytes):
            parts.append([PART, view[start : start + chunk_bytes]])
    return parts


class Reassembly:
    """The messages arriving from one peer, large ones put back together."""

    def __init__(self, max_message_bytes: int) -> None:
        self._max = max_message_bytes
        self._frames: list[memoryview] = []
        self._frame = 0
        """Index of the frame the next chunk goes into (``len(_frames)``: none under way)."""
        self._filled = 0

    def feed(self, message: Sequence[Any]) -> list[Any] | None:
        """The message ``message`` completes, if any; raises `ChunkError` for a bad sequence.

        After an error nothing is under way: the next message starts afresh.
        """
        kind = bytes(message[0]) if message else b""
        try:
            if self._frame < len(self._frames):
                return self._part(kind, message)
            if kind == PART:
                raise ChunkError("a chunk that no LARGE message announced")
            if kind == LARGE:
                return self._announced(message)
            return list(message)
        except ChunkError:
            self._frames, self._frame, self._filled = [], 0, 0
            raise

    def _announced(self, message: Sequence[Any]) -> list[Any] | None:
        if len(message) != 2:
            raise ChunkError("a LARGE message without exactly one layout frame")
        try:
            sizes = _layout.decode(message[1])
        except (msgspec.MsgspecError, ValueError) as exc:
            raise ChunkError(f"a bad layout: {exc}") from None
        if not 0 < len(sizes) <= MAX_FRAMES:
            raise ChunkError(f"a layout of {len(sizes)} frames (at most {MAX_FRAMES})")
        if any(size < 0 for size in sizes):
            raise ChunkError("a layout with a negative size")
        total = sum(sizes)
        if total > self._max:
            raise ChunkError(
                f"a message of {total} bytes (the limit, max_message_bytes, is {self._max})"
            )
        self._frames = [allocate(size) for size in sizes]
        self._frame, self._filled = 0, 0
        return self._complete()

    def _part(self, kind: bytes, message: Sequence[Any]) -> list[Any] | None:
        if kind != PART or len(message) != 2:
            raise ChunkError("a large message interrupted before its last chunk")
        chunk = memoryview(message[1]).cast("B")
        frame = self._frames[self._frame]
        end = self._filled + chunk.nbytes
        if chunk.nbytes == 0 or end > frame.nbytes:
            raise ChunkError("a chunk that does not fit the frame it fills")
        frame[self._filled : end] = chunk
        self._filled = end
        return self._complete()

    def _complete(self) -> list[Any] | None:
        """Move past full frames; the message once every frame is full."""
        while self._frame < len(self._frames) and self._filled == self._frames[self._frame].nbytes:
            self._frame, self._filled = self._frame + 1, 0
        if self._frame < len(self._frames):
            return None
        frames, self._frames, self._frame = self._frames, [], 0
        return list(frames)
