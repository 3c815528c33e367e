"""How a proc's C allocator is set up: large blocks on transparent huge pages.

A large argument that arrives as ``bytes`` (or ``bytearray``) is copied once
out of the received buffer into memory that the C allocator maps fresh for
it, and the kernel then faults that memory in page by page as the copy
writes it. With 4 KiB pages a 64 MiB copy takes about 45 ms on a small
virtual machine; when glibc asks for transparent huge pages for the blocks it
maps (the ``glibc.malloc.hugetlb=1`` tunable, glibc 2.35 and later), about
10 ms. The tunable is read when a process starts, so procs are started with
it; a ``GLIBC_TUNABLES`` that already sets it is left as it is, and a C
library that does not know it ignores it.
"""

from __future__ import annotations

from collections.abc import Mapping

TUNABLES = "GLIBC_TUNABLES"
HUGE_PAGES = "glibc.malloc.hugetlb=1"


def proc_environment(environment: Mapping[str, str]) -> dict[str, str]:
    """``environment``, with huge pages for the C allocator unless it says otherwise."""
    tunables = environment.get(TUNABLES, "")
    if "glibc.malloc.hugetlb=" in tunables:
        return dict(environment)
    return {**environment, TUNABLES: f"{tunables}:{HUGE_PAGES}" if tunables else HUGE_PAGES}
