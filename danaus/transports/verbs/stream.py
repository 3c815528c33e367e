"""How messages travel on a message queue pair: a stream cut into SENDs, large frames read.

Every SEND fills one receive buffer of the peer: a fragment header (its kind,
the credits and releases it reports), then bytes of the stream of messages.
A message on the stream is its frame count, an entry per frame (its size and,
for a frame the receiver reads itself, where and with which key), then the
bytes of its small frames. A frame larger than ``inline_limit`` stays in the
sender's memory, registered for remote reads: the receiver allocates room for
it and fetches it with RDMA READ, then reports the message released, and the
sender lets the memory go. Messages are delivered in the order sent.

The receiver checks the frame count and the total size against the limits
before it allocates anything; a message over ``max_message_bytes`` is refused:
its leading small frames are kept (a kind, an envelope: what its sender needs
to hear of it), its other bytes read and thrown away, nothing fetched, and the
stream goes on.
"""

from __future__ import annotations

import enum
import struct
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from danaus.core import wire
from danaus.core.settings import ENVELOPE_ROOM
from danaus.transports.tcp.buffers import allocate
from danaus.transports.tcp.records import carried_frames
from danaus.transports.verbs.registrations import Pin

MAX_FRAMES = 1 + wire.MAX_FRAMES
"""A kind frame, then at most what the wire allows."""

FRAGMENT = struct.Struct("<BxxxII")
_COUNT = struct.Struct("<I")
_ENTRY = struct.Struct("<QQII")


class Fragment(enum.IntEnum):
    DATA = 1
    """Bytes of the stream follow the header."""
    UPDATE = 2
    """Only the header: credits and releases."""


class StreamError(ValueError):
    """The stream cannot be read on (a frame count out of range)."""


@dataclass(frozen=True)
class RemoteFrame:
    """A frame the receiver reads from the sender's memory."""

    index: int
    size: int
    address: int
    rkey: int


@dataclass
class Incoming:
    """A message whose header and small frames have arrived."""

    frames: list[memoryview]
    remote: list[RemoteFrame]
    error: str | None = None
    """Why the message is refused (too large): ``frames`` are then only its leading ones."""


class Outgoing:
    """One message's bytes on the stream, and the pins of the frames the peer will read."""

    def __init__(
        self, frames: Sequence[Any], pin: Callable[[memoryview], Pin | None], inline_limit: int
    ) -> None:
        """``pin`` registers a large frame for the peer to read (None: it goes inline after all)."""
        views = [memoryview(frame).cast("B") for frame in frames]
        entries = [_COUNT.pack(len(views))]
        self.pins: list[Pin] = []
        self._pieces: deque[memoryview] = deque()
        for view in views:
            pinned = pin(view) if view.nbytes > inline_limit else None
            if pinned is not None:
                self.pins.append(pinned)
                entries.append(_ENTRY.pack(view.nbytes, pinned.iova(), pinned.rkey, 1))
            else:
                entries.append(_ENTRY.pack(view.nbytes, 0, 0, 0))
                if view.nbytes:
                    self._pieces.append(view)
        self._pieces.appendleft(memoryview(b"".join(entries)))

    @property
    def done(self) -> bool:
        return not self._pieces

    def fill(self, out: memoryview) -> int:
        """Copy the next bytes of the message into ``out``; how many."""
        written = 0
        while self._pieces and written < out.nbytes:
            piece = self._pieces[0]
            count = min(piece.nbytes, out.nbytes - written)
            out[written : written + count] = piece[:count]
            written += count
            if count == piece.nbytes:
                self._pieces.popleft()
            else:
                self._pieces[0] = piece[count:]
        return written


@dataclass
class Reassembly:
    """Reads the stream of one peer, fragment by fragment, into messages."""

    max_message_bytes: int
    limit: str = ""
    """What a refusal says of the limit."""
    _header: bytearray = field(default_factory=bytearray)
    _wanted: int = _COUNT.size
    _count: int = -1
    _message: Incoming | None = None
    _inline: deque[memoryview | int] = field(default_factory=deque)
    """What the small frames' bytes go into, in order (an int: that many bytes skipped)."""

    def feed(self, data: memoryview) -> list[Incoming]:
        """The messages ``data`` completes; raise `StreamError` when the stream is corrupt."""
        done: list[Incoming] = []
        position = 0
        while position < data.nbytes:
            if self._message is None:
                take = min(self._wanted - len(self._header), data.nbytes - position)
                self._header += data[position : position + take]
                position += take
                if len(self._header) == self._wanted:
                    self._parsed()
            else:
                position += self._copy(data[position:])
            if self._message is not None and not self._inline:
                done.append(self._message)
                self._message = None
        return done

    def _parsed(self) -> None:
        if self._count < 0:
            (count,) = _COUNT.unpack(self._header)
            if not 1 <= count <= MAX_FRAMES:
                raise StreamError(f"a message of {count} frames (1 to {MAX_FRAMES})")
            self._count = count
            self._wanted = _COUNT.size + _ENTRY.size * count
            return
        entries = [
            _ENTRY.unpack_from(self._header, _COUNT.size + _ENTRY.size * i)
            for i in range(self._count)
        ]
        self._header = bytearray()
        self._wanted = _COUNT.size
        self._count = -1
        total = sum(size for size, _, _, _ in entries)
        if total > self.max_message_bytes:
            limit = self.limit or f"at most {self.max_message_bytes}"
            self._refuse(entries, f"a message of {total} bytes ({limit})")
            return
        self._message = Incoming([], [])
        for index, (size, address, rkey, remote) in enumerate(entries):
            frame = allocate(size)
            self._message.frames.append(frame)
            if remote:
                self._message.remote.append(RemoteFrame(index, size, address, rkey))
            elif size:
                self._inline.append(frame)

    def _refuse(self, entries: list[tuple[int, int, int, int]], error: str) -> None:
        """Keep the leading inline frames (at most `ENVELOPE_ROOM` together), skip the rest."""
        sizes = [0 if remote else size for size, _, _, remote in entries]
        keep = carried_frames(sizes, ENVELOPE_ROOM)
        keep = next((i for i, entry in enumerate(entries[:keep]) if entry[3]), keep)
        leading = [allocate(size) for size in sizes[:keep]]
        remote = [RemoteFrame(i, size, a, k) for i, (size, a, k, r) in enumerate(entries) if r]
        self._message = Incoming(leading, remote, error)
        self._inline.extend(frame for frame in leading if frame.nbytes)
        skip = sum(sizes[keep:])
        if skip:
            self._inline.append(skip)

    def _copy(self, data: memoryview) -> int:
        copied = 0
        while self._inline and copied < data.nbytes:
            target = self._inline[0]
            if isinstance(target, int):
                count = min(target, data.nbytes - copied)
                if count == target:
                    self._inline.popleft()
                else:
                    self._inline[0] = target - count
            else:
                count = min(target.nbytes, data.nbytes - copied)
                target[:count] = data[copied : copied + count]
                if count == target.nbytes:
                    self._inline.popleft()
                else:
                    self._inline[0] = target[count:]
            copied += count
        return copied
