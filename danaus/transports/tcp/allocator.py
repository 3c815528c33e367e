"""How a proc's C allocator is set up: large blocks on transparent huge pages, and kept.

A large argument that arrives as ``bytes`` (or ``bytearray``) lives in memory
that the C allocator maps fresh for it, and the kernel then faults that memory
in page by page as it is written. With 4 KiB pages 64 MiB take about 45 ms on
a small virtual machine; when glibc asks for transparent huge pages for the
blocks it maps (the ``glibc.malloc.hugetlb=1`` tunable, glibc 2.35 and later),
about 10 ms.

Blocks of up to `MMAP_THRESHOLD` come from the allocator's heaps instead, and
a heap keeps up to `TRIM_THRESHOLD` of freed memory at its top: a proc that
receives a 1 MiB argument per call then fills the same pages again, where it
would otherwise have had a fresh 2 MiB page mapped, and zeroed by the kernel,
for each one (about a sixth of such a call's time). glibc reaches these values
by itself once it has freed such blocks, but not with ``hugetlb=1``. The price
is memory: a proc may keep up to `TRIM_THRESHOLD` bytes it freed.

The tunables are read when a process starts, so procs are started with them;
one that ``GLIBC_TUNABLES`` already sets is left as it is, and a C library that
does not know them ignores them.
"""

from __future__ import annotations

from collections.abc import Mapping

TUNABLES = "GLIBC_TUNABLES"
MMAP_THRESHOLD = 32 * 1024 * 1024
"""Larger blocks are mapped for themselves (the most glibc's own adjustment goes to)."""
TRIM_THRESHOLD = 2 * MMAP_THRESHOLD
"""Freed memory a heap keeps at its top before giving it back to the kernel."""
SETTINGS = (
    ("glibc.malloc.hugetlb", 1),
    ("glibc.malloc.mmap_threshold", MMAP_THRESHOLD),
    ("glibc.malloc.trim_threshold", TRIM_THRESHOLD),
)


def proc_environment(environment: Mapping[str, str]) -> dict[str, str]:
    """``environment``, with this module's allocator settings where it has none of its own."""
    tunables = [item for item in environment.get(TUNABLES, "").split(":") if item]
    given = {item.partition("=")[0] for item in tunables}
    tunables += [f"{name}={value}" for name, value in SETTINGS if name not in given]
    return {**environment, TUNABLES: ":".join(tunables)}
