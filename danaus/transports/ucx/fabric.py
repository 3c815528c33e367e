"""Where large messages are worth UCX: only where it has a faster way than the stream plane.

Within a host, `ucxx`'s connections rule out UCX's shared-memory transports
(see `danaus.transports.ucx.split`). Between hosts, UCX beats the stream plane
over an RDMA fabric (InfiniBand, RoCE); without one it carries the bytes over
its own TCP transport, through bounce buffers and in clear, at about a third
of the stream plane's rate on the machine of the performance page, which
encrypts them besides. So by default (the ``ucx_bulk`` setting ``auto``) a proc
sends large messages over UCX only to procs of other hosts, and only if the
kernel shows it an RDMA device and ``UCX_TLS`` (if set) leaves UCX a transport
that uses one; ``ucx`` (``DANAUS_UCX_BULK=ucx``) sends them over UCX everywhere.
`RDMABuffer` transfers are not messages: they take UCX whatever this says.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

RDMA_DEVICES = Path("/sys/class/infiniband")
"""Where the kernel lists the RDMA devices of this host (InfiniBand and RoCE alike)."""

_WITHOUT_RDMA = frozenset(
    {
        "self",
        "tcp",
        "sm",
        "shm",
        "mm",
        "posix",
        "sysv",
        "xpmem",
        "cma",
        "knem",
        "cuda",
        "cuda_copy",
        "cuda_ipc",
        "gdr_copy",
        "rocm",
        "rocm_copy",
        "rocm_ipc",
        "rocm_gdr",
    }
)
"""Names in ``UCX_TLS`` of transports that move no bytes between hosts over RDMA."""


@dataclass(frozen=True)
class BulkRoutes:
    """Which large messages a proc sends over UCX (the others stay on the stream plane)."""

    on_this_host: bool
    """To procs of its own host."""
    between_hosts: bool
    """To procs of other hosts."""
    why: str
    """Why not, where either is False (for the log)."""


def rdma_devices(devices: Path = RDMA_DEVICES) -> list[str]:
    """The RDMA devices the kernel shows this host (none where ``devices`` does not exist)."""
    try:
        return sorted(os.listdir(devices))
    except OSError:
        return []


def ucx_may_use_rdma(environ: Mapping[str, str], devices: Path = RDMA_DEVICES) -> bool:
    """Whether UCX may reach other hosts over an RDMA device here."""
    if not rdma_devices(devices):
        return False
    names = [name.strip() for name in environ.get("UCX_TLS", "").split(",") if name.strip()]
    if not names or names[0].startswith("^"):
        return True
    return any(name not in _WITHOUT_RDMA for name in names)


def bulk_routes(bulk: str, environ: Mapping[str, str], devices: Path = RDMA_DEVICES) -> BulkRoutes:
    """The routes of this proc's large messages, as its ``ucx_bulk`` setting (``bulk``: ``auto``
    or ``ucx``), its environment's ``UCX_TLS`` and the host's devices make them."""
    if bulk == "ucx":
        return BulkRoutes(on_this_host=True, between_hosts=True, why="")
    if ucx_may_use_rdma(environ, devices):
        return BulkRoutes(on_this_host=False, between_hosts=True, why="")
    why = (
        f"no RDMA device for UCX on this host (none in {devices}, or UCX_TLS excludes them); "
        "the stream plane is faster than UCX over TCP"
    )
    return BulkRoutes(on_this_host=False, between_hosts=False, why=why)
