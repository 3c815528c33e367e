"""A ring of memory shared by the two procs of one local data connection.

The records of a large message cost each side a copy through the kernel when
they cross a Unix socket, about as much as sealing or opening them. Between
procs of one host the sender seals them instead straight into memory that both
map, and puts on the socket only a descriptor: the record's length with the
`records.RING_RECORD` bit set. The receiver opens the record from the ring
into the message's memory as it would a record from the socket: the nonce
sequence is the connection's, so the AEAD authenticates a ring record as it
does any other, and a record the peer changed fails to open.

The ring is single producer, single consumer. Both sides place each ring
record by one rule (`place`): at the position the ring is filled to (a
monotonic byte count), or at the ring's start if it would cross the end, the
skipped tail counting as used. The receiver publishes how far it has taken
records in the ring's header, an aligned 8-byte word stored and loaded whole;
the sender uses the ring for a record only if it fits in the space the
receiver has released, and sends it on the socket otherwise (it never waits).

Releasing space relies on x86-64's total store order: the receiver's loads of
a record's bytes complete before its store of the new position becomes visible
to the sender, which then overwrites them. Weaker memory models (ARM, POWER)
let a later store overtake earlier loads, and Python offers no fence, so other
machines keep to the socket (`SUPPORTED`).

The sender makes the ring: a memfd, sealed against shrinking and growing (the
receiver's accesses can never fault on a truncated file) and against further
seals, passed with SCM_RIGHTS once the connection's challenge has passed. The
receiver checks it (`accept`) before it maps it, and refuses the connection
otherwise. The memory goes when the last mapping and descriptor of it do.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import mmap
import os
import platform
import stat

from danaus.transports.tcp.records import RecordError

SUPPORTED = platform.machine().lower() in {"x86_64", "amd64"}
"""Machines whose memory order lets a ring's space be released by a plain store (see above)."""

HEADER_BYTES = mmap.PAGESIZE
"""The ring's header: the receiver's position (8 bytes), alone on its page."""

RING_BYTES = 2 * 1024 * 1024
"""The ring's size. With encryption the first MiB of a large message travels in records of
256 KiB (`streams.LEAD_CHUNK_BYTES`): 2 MiB holds all of a 1 MiB argument's records even when
they wrap around the end (which may skip up to one record's length), and a whole 1 MiB record
in clear, while the receiver still opens the previous message's last ones. Its pages are
touched only as records are placed: a pair that sends no large message costs no memory."""

MIN_RING_BYTES = 64 * 1024
MAX_RING_BYTES = 64 * 1024 * 1024
"""The ring sizes a receiver accepts: a peer cannot make it map more than this."""

SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL
"""Exactly the seals a ring has: its size is fixed, and the sender can still write to it."""

OFFER = b"R"
"""The byte that carries the ring's descriptor, right after the challenge (Unix sockets only)."""
NO_OFFER = b"-"
"""The byte sent instead when the sender shares no ring (another machine, no memfd)."""


class RingError(ValueError):
    """A ring that breaks the rules: the connection cannot go on."""


def place(position: int, nbytes: int, size: int) -> tuple[int, int]:
    """Where a record of ``nbytes`` goes in a ring of ``size`` filled up to ``position``.

    Returns its offset in the ring and the position after it. A record that
    would cross the end goes at the start; the tail it skips counts as used.
    """
    offset = position % size
    if offset + nbytes > size:
        position += size - offset
        offset = 0
    return offset, position + nbytes


class _Shared:
    """The mapping both sides have: the header's word and the records' bytes."""

    def __init__(self, memory: mmap.mmap) -> None:
        self._memory = memory
        self.size = len(memory) - HEADER_BYTES
        self._word: ctypes.c_uint64 | None = ctypes.c_uint64.from_buffer(memory, 0)
        """The receiver's position: one aligned 8-byte store or load, never seen torn."""
        self._data = memoryview(memory)[HEADER_BYTES:]

    def close(self) -> None:
        """Unmap, closing the descriptor the mapping holds.

        Should a view of it still be alive, the mapping goes with the last one.
        """
        self._word = None
        with contextlib.suppress(BufferError):
            self._data.release()
            self._memory.close()


class Producer(_Shared):
    """The sender's side: places records where the receiver has released space."""

    def __init__(self, memory: mmap.mmap) -> None:
        super().__init__(memory)
        self.produced = 0
        self._consumed = 0
        self.placed = 0
        """Records placed in the ring so far."""

    def slot(self, nbytes: int) -> memoryview | None:
        """Where to write the next record of ``nbytes``, if the ring has room (else None).

        Raises `RingError` if the receiver published a position it cannot have
        reached: it moved back, or past what was placed.
        """
        if nbytes > self.size:
            return None
        assert self._word is not None
        consumed = self._word.value
        if not self._consumed <= consumed <= self.produced:
            raise RingError(
                f"the receiver claims {consumed} bytes taken from the ring "
                f"(at least {self._consumed} and at most {self.produced} can be)"
            )
        self._consumed = consumed
        offset, end = place(self.produced, nbytes, self.size)
        if end - consumed > self.size:
            return None
        self.produced = end
        self.placed += 1
        return self._data[offset : offset + nbytes]


class Consumer(_Shared):
    """The receiver's side: finds each record where the sender placed it, then releases it."""

    def __init__(self, memory: mmap.mmap) -> None:
        super().__init__(memory)
        self.consumed = 0
        self._next = 0
        self.taken = 0
        """Records taken from the ring so far."""

    def record(self, nbytes: int) -> memoryview:
        """The next record's bytes (``nbytes`` from its descriptor); `release` it once read."""
        if nbytes > self.size:
            raise RecordError(f"a record of {nbytes} bytes in a ring of {self.size}")
        offset, self._next = place(self.consumed, nbytes, self.size)
        return self._data[offset : offset + nbytes]

    def release(self) -> None:
        """The last record is read: the sender may overwrite it (one store of the position)."""
        assert self._word is not None
        self.consumed = self._next
        self._word.value = self.consumed
        self.taken += 1


def create(size: int | None = None) -> tuple[Producer, int]:
    """A new ring of ``size`` bytes (default `RING_BYTES`) and the descriptor to pass.

    The caller closes the descriptor once it is passed (the mapping holds its own).
    Raises `OSError` if the system cannot make one.
    """
    size = RING_BYTES if size is None else size
    fd = os.memfd_create("danaus-ring", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        os.ftruncate(fd, HEADER_BYTES + size)
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, SEALS)
        memory = mmap.mmap(fd, HEADER_BYTES + size)
    except BaseException:
        os.close(fd)
        raise
    return Producer(memory), fd


def accept(fd: int) -> Consumer:
    """Map the ring a peer passed as ``fd`` (always closed here), if it is one.

    Raises `RingError` unless it is a memfd with exactly `SEALS` and a size
    between `MIN_RING_BYTES` and `MAX_RING_BYTES` after the header.
    """
    try:
        if not SUPPORTED:
            raise RingError(
                f"a shared-memory ring, which this machine ({platform.machine()}) does not use"
            )
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode) or not os.readlink(f"/proc/self/fd/{fd}").startswith(
            "/memfd:"
        ):
            raise RingError("a shared-memory ring that is not a memfd")
        try:
            seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
        except OSError:
            seals = None
        if seals != SEALS:
            raise RingError(f"a shared-memory ring sealed {seals!r}, not {SEALS}")
        size = status.st_size - HEADER_BYTES
        if not MIN_RING_BYTES <= size <= MAX_RING_BYTES:
            raise RingError(
                f"a shared-memory ring of {size} bytes (from {MIN_RING_BYTES} to "
                f"{MAX_RING_BYTES} are accepted)"
            )
        return Consumer(mmap.mmap(fd, HEADER_BYTES + size))
    finally:
        os.close(fd)
