"""RDMA buffers: register memory once, let any actor read or write it directly.

    buffer = RDMABuffer(weights)          # on the owner: no copy
    other.pull.call_one(buffer).get()     # elsewhere: buffer.read_into(local).get()

`backend()` says what moves the data on the current transport, and whether it
is a fallback without RDMA hardware. A transfer the owner's side refuses (the
buffer was dropped, on RDMA hardware) fails with `RDMAError`, which names the buffer.
"""

from danaus.core.rdma import (
    Backend,
    RDMAAction,
    RDMABuffer,
    RDMAError,
    RDMAFallbackWarning,
    backend,
)

__all__ = ["Backend", "RDMAAction", "RDMABuffer", "RDMAError", "RDMAFallbackWarning", "backend"]
