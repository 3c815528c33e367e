"""The ``verbs`` transport: tcp's control plane, data on reliable-connected RDMA queue pairs.

Messages between actors are SENDs into receive buffers posted ahead, under
credit-based flow control; `RDMABuffer` transfers are one-sided RDMA READs and
WRITEs that the owner's NIC serves. The device is chosen by each process's
settings (``verbs_provider``, ``verbs_device`` and the rest, from its
environment, `danaus.core.settings`): RDMA hardware through pyverbs, or
(``DANAUS_VERBS_PROVIDER=emulated``, a test facility) a device emulated
between processes. Selecting ``verbs`` on a host without a usable device, or
without pyverbs, fails in `configured`, with one sentence saying why and
what to use instead.
"""

from __future__ import annotations

from danaus.core.settings import FIELDS, Settings
from danaus.transports import tcp
from danaus.transports.tcp.world import TcpWorld
from danaus.transports.verbs import providers
from danaus.transports.verbs.transport import VerbsTransport

__all__ = ["OPTIONS", "VerbsWorld", "World", "configured", "create_world"]


class VerbsWorld(TcpWorld):
    """A process's world on the verbs transport: tcp's control plane, verbs's data plane."""

    name = "verbs"
    transport_class = VerbsTransport
    transport: VerbsTransport


World = VerbsWorld
"""The world class of this transport (workers make theirs with ``World.worker``)."""

OPTIONS = tcp.OPTIONS | {name for name in FIELDS if name.startswith("verbs_")}
"""The settings this transport takes: tcp's, and which device each process uses."""


def configured(settings: Settings) -> None:
    """Check the settings (as tcp does) and that this host has a device to use.

    Raises ``ImportError`` when pyverbs is missing and ``RuntimeError`` when no
    RDMA device can be used, each with one sentence that says what to do.
    """
    tcp.configured(settings)
    providers.check(settings)


def create_world(settings: Settings) -> VerbsWorld:
    """The controller's world (``configured`` has checked the settings and the device)."""
    return VerbsWorld.controller(settings)
