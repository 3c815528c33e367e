"""Memory for a buffer that arrives in pieces (tcp records, UCX frames).

Large buffers are mapped from the kernel with their pages populated at once:
the buffer is about to be filled whole, and the kernel filling a mapping in
one call costs far less than a fault per page as the bytes arrive (on a
virtual machine, many times less). No thread holds the GIL to clear them.
"""

from __future__ import annotations

import mmap

MAPPED_FROM = 1024 * 1024
"""Buffers of at least this many bytes are mapped; smaller ones are bytearrays."""

_POPULATED = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | getattr(mmap, "MAP_POPULATE", 0)


def allocate(nbytes: int) -> memoryview:
    """A writable buffer of ``nbytes`` bytes (checked against the limits by the caller)."""
    if nbytes >= MAPPED_FROM:
        return memoryview(mmap.mmap(-1, nbytes, flags=_POPULATED))
    return memoryview(bytearray(nbytes))
