"""Memory for a buffer that arrives in pieces (tcp records, UCX frames).

Large buffers are mapped from the kernel with their pages populated at once:
the buffer is about to be filled whole, and the kernel filling a mapping in
one call costs far less than a fault per page as the bytes arrive (on a
virtual machine, many times less). The pages are populated by ``madvise``
through ctypes, which lets go of the GIL: ``mmap`` with ``MAP_POPULATE``
holds it for as long as the kernel works (0.4 s for 1 GiB on a small VM),
and no other thread of the proc, heartbeats included, would run meanwhile.

A connection that receives large messages again and again (a tensor each
step) keeps a few of their buffers in a `BufferCache`, and fills one again
once nothing refers to it any more: the array, tensor or bytes made from it
are gone, so no object can see its bytes change.

A frame of `STORAGE_FROM` bytes or more is received into the storage of a
bytes object of its own instead (`serialize.bytes_storage`): if it carries a
``bytes`` value, that object is the value, with no copy. The cache keeps these
objects too, and fills one again, for a frame of its size, once nothing else
refers to it (`serialize.storage_again`): a program that passes large
``bytes`` again and again drops each before the next arrives, and the next is
received into memory already mapped rather than memory the kernel maps and
zeroes anew (glibc maps each block above 32 MiB for itself). On a small VM,
64 MiB took the receiving thread 5-10 ms of CPU into kept storage, 6-40 ms
into new storage (the low end with the procs' allocator settings,
`danaus.transports.tcp.allocator`), and 15-50 ms into a kept buffer and then a
copy (`benchmarks/bytes_receive.py`). New storage is not populated ahead, as
mapped buffers are: its pages fault in as records are opened into it, each a
short hold of the GIL, and populating it first cost more than the faults.
"""

from __future__ import annotations

import ctypes
import mmap
import sys
from collections.abc import Sequence

from danaus.core.serialize import bytes_storage, storage_again

MAPPED_FROM = 1024 * 1024
"""Buffers of at least this many bytes are mapped; smaller ones are bytearrays."""

MADV_POPULATE_WRITE = 23
"""Linux 5.14 and later: fault in a range's pages, writable, in one call."""

STORAGE_FROM = 512 * 1024
"""Frames of at least this many bytes are received into bytes storage of their own (making
its type costs about 10 µs, as much as copying a quarter of a MiB)."""

POPULATE_STEP = 16 * 1024 * 1024
"""Bytes populated per call: the kernel holds the process's memory map meanwhile, and a
thread that needs it changed (to allocate) waits for at most one step, not the whole buffer."""

_libc = ctypes.CDLL(None)
_libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)


def _mapped(nbytes: int) -> mmap.mmap:
    """An anonymous mapping of ``nbytes``, populated (`_populate`)."""
    buffer = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    _populate(ctypes.addressof(ctypes.c_char.from_buffer(buffer)), nbytes)
    return buffer


def _populate(start: int, nbytes: int) -> None:
    """Fault in the whole pages of ``nbytes`` at address ``start``, without the GIL where the
    kernel can; on an older kernel ``madvise`` fails and the pages fault in as they are written.
    """
    end = (start + nbytes) & -mmap.PAGESIZE
    start = -(-start // mmap.PAGESIZE) * mmap.PAGESIZE
    for offset in range(start, end, POPULATE_STEP):
        if _libc.madvise(offset, min(POPULATE_STEP, end - offset), MADV_POPULATE_WRITE) != 0:
            break


def allocate(nbytes: int) -> memoryview:
    """A writable buffer of ``nbytes`` bytes (checked against the limits by the caller)."""
    if nbytes >= MAPPED_FROM:
        return memoryview(_mapped(nbytes))
    return memoryview(bytearray(nbytes))


class BufferCache:
    """Large buffers of one connection, each used again once nothing else refers to it."""

    def __init__(self, max_bytes: int) -> None:
        self._max_bytes = max_bytes
        self._kept: list[mmap.mmap | bytes] = []
        """Mapped buffers and bytes objects (`STORAGE_FROM`), newest last."""

    def frames(self, sizes: Sequence[int]) -> list[memoryview]:
        """Writable buffers for frames of ``sizes`` bytes: each its own bytes storage, if it
        is of `STORAGE_FROM` bytes or more, else slices of one buffer (`allocate`)."""
        shared = self.allocate(sum(size for size in sizes if size < STORAGE_FROM))
        frames = []
        at = 0
        for size in sizes:
            if size >= STORAGE_FROM:
                frames.append(self._storage(size))
            else:
                frames.append(shared[at : at + size])
                at += size
        return frames

    def _storage(self, nbytes: int) -> memoryview:
        """The storage of a bytes object of ``nbytes``: a kept one that nothing else refers
        to, else a new one."""
        kept = self._kept
        for index in range(len(kept)):
            # Referred to by the list and by this call's argument alone: no one can see it.
            if (
                type(kept[index]) is bytes
                and len(kept[index]) == nbytes
                and sys.getrefcount(kept[index]) == 2
            ):
                owner = kept.pop(index)
                storage = storage_again(owner)
                if storage is not None:
                    self._keep(owner)
                    return storage
                break
        storage = bytes_storage(nbytes)
        self._keep(storage.obj.owner)
        return storage

    def allocate(self, nbytes: int) -> memoryview:
        """A writable buffer of ``nbytes`` bytes: a free kept one that fits, else a new one."""
        if nbytes < MAPPED_FROM:
            return memoryview(bytearray(nbytes))
        kept = self._kept
        for index in range(len(kept)):
            # Referred to by the list and by this call's argument alone: no view of it is left.
            if (
                type(kept[index]) is mmap.mmap
                and nbytes <= len(kept[index]) <= 2 * nbytes
                and sys.getrefcount(kept[index]) == 2
            ):
                buffer = kept.pop(index)
                self._keep(buffer)
                return memoryview(buffer)[:nbytes]
        fresh = _mapped(nbytes)
        self._keep(fresh)
        return memoryview(fresh)

    def _keep(self, buffer: mmap.mmap | bytes) -> None:
        """Keep ``buffer`` (newest last); forget the oldest beyond the byte budget."""
        if len(buffer) > self._max_bytes:
            return
        self._kept.append(buffer)
        while sum(len(kept) for kept in self._kept) > self._max_bytes:
            self._kept.pop(0)
