"""Memory for a buffer that arrives in pieces (tcp chunks, UCX frames).

Large buffers are mapped from the kernel: the pages are zero and cost nothing
until written, and no thread holds the GIL to clear them first.
"""

from __future__ import annotations

import mmap

MAPPED_FROM = 1024 * 1024
"""Buffers of at least this many bytes are mapped; smaller ones are bytearrays."""


def allocate(nbytes: int) -> memoryview:
    """A writable buffer of ``nbytes`` bytes (checked against the limits by the caller)."""
    if nbytes >= MAPPED_FROM:
        return memoryview(mmap.mmap(-1, nbytes))
    return memoryview(bytearray(nbytes))
