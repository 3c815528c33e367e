"""The ``verbs`` transport: tcp's control plane, data on reliable-connected RDMA queue pairs.

Messages between actors are SENDs into receive buffers posted ahead, under
credit-based flow control; `RDMABuffer` transfers are one-sided RDMA READs and
WRITEs that the owner's NIC serves. The device is chosen by the environment
(`danaus.transports.verbs.settings`): RDMA hardware through pyverbs, or
(``DANAUS_VERBS_PROVIDER=emulated``, a test facility) a device emulated
between processes. Selecting ``verbs`` on a host without a usable device, or
without pyverbs, fails in `configured`, with one sentence saying why and
what to use instead.
"""

from __future__ import annotations

import functools
from typing import Any

from danaus.transports.tcp import configured as tcp_configured
from danaus.transports.tcp.world import TcpWorld
from danaus.transports.verbs import providers
from danaus.transports.verbs.settings import Settings
from danaus.transports.verbs.transport import VerbsTransport

__all__ = ["VerbsWorld", "World", "configured", "create_world"]


class VerbsWorld(TcpWorld):
    """A process's world on the verbs transport: tcp's control plane, verbs's data plane."""

    name = "verbs"
    transport_class = VerbsTransport
    transport: VerbsTransport


World = VerbsWorld
"""The world class of this transport (workers make theirs with ``World.worker``)."""


@functools.wraps(tcp_configured, assigned=())  # its signature is tcp's: the options it takes
def configured(**options: Any) -> None:
    """Check the options (tcp's) and that this host has a device to use.

    Raises ``ImportError`` when pyverbs is missing and ``RuntimeError`` when no
    RDMA device can be used, each with one sentence that says what to do.
    """
    tcp_configured(**options)
    providers.check(Settings.from_environment())


def create_world(**options: Any) -> VerbsWorld:
    """The controller's world (``configured`` has checked the options and the device)."""
    return VerbsWorld.controller(**options)
