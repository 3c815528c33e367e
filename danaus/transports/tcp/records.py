"""How a data connection carries messages once its challenge has passed: sealed records.

A connection is a stream of records, each a 4-byte length and that many bytes
of body. With encryption, a body is AES-256-GCM ciphertext and tag under the
connection's session key, its nonce the record's number on the connection
(never sent, never reused) and its length the associated data: a record cut
short, changed, replayed or moved fails to open. Without encryption a body is
the plain bytes, the connection having proved itself in its challenge.

A message is a header (the number of frames and the size of each) followed by
its frames' bytes. A message of at most `INLINE_BYTES` travels in one record,
its header and frames together; a larger one travels as a record holding the header
and its leading small frames (at most `CARRIED_BYTES` of them, see
`carried_frames`), then the other frames' bytes in records of at most
``chunk_bytes`` (shorter ones first, see `LEAD_BYTES`), each within one frame
and sealed when the connection is ready for it, so that a large message is
never sealed whole in advance. The
receiver checks a record's length against the limit before it reads the body,
and a header against ``max_message_bytes`` before it allocates the message's
frames (`BufferCache.frames`), which it then fills record by record, in place.
A message over the limit is refused (`Refusal`): its records are read and
dropped, unopened, and the connection goes on with the next message.

Between procs of one host, a chunk record may instead be sealed into memory the
two procs share (`danaus.transports.tcp.ring`): the stream then carries only its
length, with the `RING_RECORD` bit set, in the record's place. Such a record
keeps its number in the connection's sequence (its nonce), and those 4 bytes
are its associated data, so it opens only where and as it was sealed.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from danaus.core import wire
from danaus.transports.tcp.buffers import BufferCache

if TYPE_CHECKING:
    import mmap

LENGTH = struct.Struct("<I")
"""The length of the record body that follows."""
RING_RECORD = 0x80000000
"""Set in a record's length: its body is in the connection's shared ring, not on the stream
(record lengths are far below 2**31)."""
TAG_BYTES = 16
MAX_FRAMES = 1 + wire.MAX_FRAMES
"""A kind frame, then at most what the wire allows."""

INLINE_BYTES = 128 * 1024
"""A message up to this size travels in one record; a larger one is read into place."""

LEAD_BYTES = 1024 * 1024
"""The first bytes of a large message, which may go in shorter records (``lead_chunk_bytes``):
the receiver opens each while the sender seals the next, so that a message of a few MiB
is not sealed and then opened whole, one after the other. Past them, long records cost
less per byte."""

CARRIED_BYTES = 64 * 1024
"""The most bytes of leading frames a large message's header record carries. A call's
kind, envelope and pickle come before its large buffers: in the header's record they
cost no record each (a seal, a write that wakes the peer, an opening)."""

_NONCE = struct.Struct("<Q4x")
_COUNT = struct.Struct("<I")
_SIZE = struct.Struct("<Q")


class RecordError(ValueError):
    """A record or message that breaks the protocol: the connection cannot go on."""


@dataclass(frozen=True)
class Refusal:
    """A message refused for its size: the leading frames that came with its header, and why."""

    frames: list[memoryview]
    reason: str


class Cipher:
    """One direction of one connection: seals or opens its records in order.

    ``key`` None: records travel in clear (``encrypt=False``).
    """

    def __init__(self, key: bytes | None) -> None:
        self._aead = AESGCM(key) if key is not None else None
        self._number = 0
        self.overhead = TAG_BYTES if key is not None else 0
        """Bytes a sealed body has beyond its plain bytes."""

    @property
    def encrypts(self) -> bool:
        return self._aead is not None

    def seal(self, plain: Any, into: bytearray | mmap.mmap | None = None) -> list[Any]:
        """The buffers of one record carrying ``plain`` (a bytes-like object).

        ``into``: a buffer the sealed record is written to (it must be large
        enough, and not still in use), instead of a new one.
        """
        size = memoryview(plain).nbytes
        if self._aead is None:
            return [LENGTH.pack(size), plain]
        length = LENGTH.pack(size + TAG_BYTES)
        total = LENGTH.size + size + TAG_BYTES
        record = memoryview(into)[:total] if into is not None else memoryview(bytearray(total))
        record[: LENGTH.size] = length
        self.seal_body(plain, length, record[LENGTH.size :])
        return [record]

    def seal_body(self, plain: Any, length: bytes, out: memoryview) -> None:
        """Write the body of the record carrying ``plain`` to ``out`` (``overhead`` bytes more).

        ``length``: the 4 bytes that stand for the record on the stream.
        """
        if self._aead is None:
            out[:] = memoryview(plain).cast("B")
        else:
            self._aead.encrypt_into(self._nonce(), plain, length, out)

    def skip(self) -> None:
        """Pass over one record without opening it (its number is used all the same)."""
        self._number += 1

    def open_into(self, length: bytes, body: memoryview, out: memoryview) -> None:
        """Open a sealed ``body`` into ``out`` (its plain size). Raises `RecordError`."""
        assert self._aead is not None
        try:
            self._aead.decrypt_into(self._nonce(), body, length, out)
        except InvalidTag:
            raise RecordError("a record that does not open under the connection's key") from None

    def _nonce(self) -> bytes:
        nonce = _NONCE.pack(self._number)
        self._number += 1
        return nonce


def _header(sizes: Sequence[int]) -> bytes:
    return struct.pack(f"<I{len(sizes)}Q", len(sizes), *sizes)


def inline_record(message: Sequence[Any], cipher: Cipher) -> list[Any] | None:
    """The one record that carries ``message`` whole, if it is small enough to (else None)."""
    sizes = [memoryview(frame).nbytes for frame in message]
    header = _header(sizes)
    size = len(header) + sum(sizes)
    if size > INLINE_BYTES:
        return None
    if cipher.encrypts:
        return cipher.seal(b"".join([header, *message]))
    return [LENGTH.pack(size), header, *message]


def message_records(
    message: Sequence[Any],
    cipher: Cipher,
    chunk_bytes: int,
    scratch: bytearray | mmap.mmap | None = None,
    lead_chunk_bytes: int | None = None,
    ring: Callable[[int], memoryview | None] | None = None,
) -> Iterator[list[Any]]:
    """The records of ``message`` (its frames), each sealed only when it is asked for.

    ``scratch`` (of at least ``chunk_bytes`` plus a record's overhead): where
    the header's record and each chunk of a large message are sealed, so the
    caller must be done with one before it asks for the next (and a writer
    that sends each such record at once wakes the peer with the header, which
    then sets up the message's frames while the first chunk is sealed).
    ``lead_chunk_bytes``: the size of the records that carry the message's
    first `LEAD_BYTES` (default: ``chunk_bytes``).
    ``ring``: where a chunk's body of so many bytes may go in shared memory, if it
    has room (`ring.Producer.slot`); such a chunk's record is its descriptor alone.
    """
    record = inline_record(message, cipher) if chunk_bytes >= INLINE_BYTES else None
    if record is not None:
        yield record
        return
    views = [memoryview(frame).cast("B") for frame in message]
    sizes = [view.nbytes for view in views]
    header = _header(sizes)
    carried = carried_frames(sizes, min(CARRIED_BYTES, chunk_bytes) - len(header))
    plain = b"".join([header, *views[:carried]])
    fits = scratch is not None and LENGTH.size + len(plain) + cipher.overhead <= len(scratch)
    yield cipher.seal(plain, scratch if fits else None)
    lead = min(chunk_bytes, lead_chunk_bytes or chunk_bytes)
    sent = 0
    for view in views[carried:]:
        start = 0
        while start < view.nbytes:
            end = min(start + (lead if sent < LEAD_BYTES else chunk_bytes), view.nbytes)
            yield _chunk_record(view[start:end], cipher, scratch, ring)
            sent += end - start
            start = end


def carried_frames(sizes: Sequence[int], room: int) -> int:
    """How many leading frames of ``sizes`` bytes fit in ``room`` bytes together."""
    count = held = 0
    for size in sizes:
        held += size
        if held > room:
            break
        count += 1
    return count


def _chunk_record(
    plain: memoryview,
    cipher: Cipher,
    scratch: bytearray | mmap.mmap | None,
    ring: Callable[[int], memoryview | None] | None,
) -> list[Any]:
    if ring is not None:
        size = plain.nbytes + cipher.overhead
        slot = ring(size)
        if slot is not None:
            descriptor = LENGTH.pack(RING_RECORD | size)
            cipher.seal_body(plain, descriptor, slot)
            return [descriptor]
    return cipher.seal(plain, scratch)


def in_ring(record: list[Any]) -> bool:
    """Whether ``record`` (from `message_records`) is a descriptor of a record in shared memory."""
    head = record[0]
    return len(head) == LENGTH.size and bool(LENGTH.unpack(head)[0] & RING_RECORD)


class Assembly:
    """The messages arriving on one connection, put together from its record bodies.

    `direct_target` tells where the next body can go once its length is known:
    in place, into a message under way, or (None) into a buffer of the reader's.
    `opened` takes a body once all of it is there.
    """

    def __init__(
        self,
        cipher: Cipher,
        max_record: int,
        max_message_bytes: int,
        buffers: BufferCache,
        limit: str = "",
    ) -> None:
        self._cipher = cipher
        self._buffers = buffers
        self.max_record = max_record
        """The longest body a record may have (checked before it is read)."""
        self._max_message = max_message_bytes
        self._limit = limit or f"at most {max_message_bytes}"
        """What a refusal says of the limit."""
        self._frames: list[memoryview] = []
        """The frames of the message under way (none: no message is under way)."""
        self._skipping = 0
        """Bytes still to come of a refused message, which are dropped."""
        self._next = 0
        """The frame being filled: the first of those not yet full."""
        self._filled = 0
        """Bytes of that frame filled so far."""

    def check_length(self, length: int) -> None:
        if length > self.max_record or length < self._cipher.overhead:
            raise RecordError(
                f"a record of {length} bytes (at most {self.max_record} on this connection)"
            )

    @property
    def filling(self) -> bool:
        """Whether a message is under way (or being dropped): the next record is part of it."""
        return bool(self._frames) or self._skipping > 0

    def direct_target(self, length: int) -> memoryview | None:
        """Where a clear body of ``length`` bytes can be read straight into, if anywhere."""
        if not self._frames or self._cipher.encrypts:
            return None
        return self._target(length)

    def opened(self, length: bytes, body: memoryview) -> list[memoryview] | Refusal | None:
        """Take the record ``body`` (``length``: its 4 length bytes); the message it ends, if
        any, or the refusal of the message it begins.

        ``body`` may be reused once this returns.
        """
        if self._skipping:
            return self._dropped(body.nbytes - self._cipher.overhead)
        if not self._frames:
            return self._message(length, body)
        target = self._target(body.nbytes - self._cipher.overhead)
        if self._cipher.encrypts:
            self._cipher.open_into(length, body, target)
        else:
            target[:] = body
        return self._advance(target.nbytes)

    def filled_in_place(self, size: int) -> list[memoryview] | None:
        """A clear body of ``size`` bytes was read into `direct_target`; the message, if done."""
        return self._advance(size)

    def _target(self, size: int) -> memoryview:
        """Where a body of ``size`` plain bytes goes: within the frame being filled."""
        frame = self._frames[self._next]
        end = self._filled + size
        if size == 0 or end > frame.nbytes:
            raise RecordError("a record that does not fit the frame it fills")
        return frame[self._filled : end]

    def _advance(self, size: int) -> list[memoryview] | None:
        self._filled += size
        if self._filled < self._frames[self._next].nbytes:
            return None
        self._filled = 0
        self._next = self._unfilled(self._next + 1)
        if self._next < len(self._frames):
            return None
        frames, self._frames = self._frames, []
        return frames

    def _unfilled(self, index: int) -> int:
        """The first frame from ``index`` on that has bytes to come (the count if none has)."""
        while index < len(self._frames) and self._frames[index].nbytes == 0:
            index += 1
        return index

    def _dropped(self, size: int) -> None:
        """A record of a refused message: nothing is kept of it."""
        if not 0 < size <= self._skipping:
            raise RecordError("a record that does not fit the message it belongs to")
        self._cipher.skip()
        self._skipping -= size

    def _message(self, length: bytes, body: memoryview) -> list[memoryview] | Refusal | None:
        plain = body
        if self._cipher.encrypts:
            plain = memoryview(bytearray(body.nbytes - TAG_BYTES))
            self._cipher.open_into(length, body, plain)
        sizes = self._sizes(plain)
        at = _COUNT.size + _SIZE.size * len(sizes)
        held = plain.nbytes - at
        whole = held == sum(sizes)
        carried = len(sizes) if whole else carried_frames(sizes, held)
        if not whole and sum(sizes[:carried]) != held:
            raise RecordError("a message header followed by the wrong number of bytes")
        if not self._cipher.encrypts:
            plain = memoryview(bytearray(plain[at:]))
            at = 0
        frames = _slices(plain, at, sizes[:carried])
        total = sum(sizes)
        if total > self._max_message:
            self._skipping = total - held
            return Refusal(frames, f"a message of {total} bytes ({self._limit})")
        if whole:
            return frames
        self._frames = frames + self._buffers.frames(sizes[carried:])
        self._next = self._unfilled(carried)
        self._filled = 0
        return None

    def _sizes(self, plain: memoryview) -> tuple[int, ...]:
        if plain.nbytes < _COUNT.size:
            raise RecordError("a message header too short to hold its frame count")
        (count,) = _COUNT.unpack_from(plain)
        if not 0 < count <= MAX_FRAMES:
            raise RecordError(f"a message of {count} frames (at most {MAX_FRAMES})")
        if plain.nbytes < _COUNT.size + _SIZE.size * count:
            raise RecordError(f"a message header too short for its {count} frames")
        return struct.unpack_from(f"<{count}Q", plain, _COUNT.size)


def _slices(buffer: memoryview, at: int, sizes: Sequence[int]) -> list[memoryview]:
    frames = []
    for size in sizes:
        frames.append(buffer[at : at + size])
        at += size
    return frames
