"""An RDMA device emulated between processes, for tests (``DANAUS_VERBS_PROVIDER=emulated``).

Each process's device is a thread that plays the NIC; devices reach each other
over Unix sockets, one per pair, like cables. It behaves as a reliable-connected
device does where the transport can tell: queue-pair states and their
transitions, packet sequence numbers, acknowledgements and retransmission,
receiver-not-ready answers when no receive is posted, remote access checks,
errors that move both queue pairs to ERR and flush what is outstanding, and
retry-exceeded failures when the peer's device stops answering (it died, or
its process is paused). It is a test facility: it moves bytes with sockets,
touches no RDMA hardware, and proves nothing about a NIC's speed.
"""

from danaus.transports.verbs.emulated.device import EmulatedDevice

__all__ = ["EmulatedDevice"]
