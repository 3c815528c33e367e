"""One queue pair to a peer with its completion queue: made, connected, polled and torn down.

Completions are taken off the Python paths that run user code: the completion
queue's event descriptor is served by the proc's I/O thread, which drains the
queue in batches each time it fires (arm, then poll again, so that no
completion that raced the arming is missed). Where pyverbs cannot wait for
events (its completion channel shows no descriptor before rdma-core 45), the
I/O thread polls every `POLL_INTERVAL` seconds instead.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass

from danaus.transports.tcp.ioloop import IoLoop
from danaus.transports.verbs.device import (
    Access,
    Completion,
    Device,
    DeviceError,
    Endpoint,
    Timeouts,
)
from danaus.transports.verbs.registrations import Registrations

log = logging.getLogger("danaus.verbs")

POLL_BATCH = 64
POLL_INTERVAL = 0.001


@dataclass
class Context:
    """What every channel of a proc shares."""

    proc: str
    io: IoLoop
    device: Device
    registrations: Registrations
    timeouts: Timeouts


class Channel:
    """A reliable-connected queue pair to ``peer`` (``generation`` tells its successive ones apart).

    States: ``offered`` (made, waiting for the peer's endpoint), ``accepted``
    (connected, the peer may not have connected yet), ``ready``, ``closed``.
    """

    kind = "queue pair"

    def __init__(
        self,
        context: Context,
        peer: str,
        generation: int,
        *,
        max_send: int,
        max_recv: int,
        access: Access,
    ) -> None:
        self.context = context
        self.peer = peer
        self.generation = generation
        self.state = "offered"
        self.psn = random.randrange(1 << 24)
        self.cq = context.device.completion_queue(max_send + max_recv)
        try:
            self.qp = context.device.queue_pair(self.cq, max_send, max_recv)
        except DeviceError:
            self.cq.close()
            raise
        try:
            self.qp.to_init(access)
        except DeviceError:
            self.qp.close()
            self.cq.close()
            raise
        self._fd = self.cq.fileno()
        if self._fd is not None:
            context.io.add_reader(self._fd, self._woken)
            self.cq.arm()

    @property
    def polled(self) -> bool:
        """Whether completions come only by polling (no event descriptor)."""
        return self._fd is None

    def endpoint(self) -> Endpoint:
        port = self.context.device.port
        return Endpoint(port.lid, port.gid, self.qp.number, self.psn, port.mtu)

    def connect(self, remote: Endpoint, state: str) -> None:
        """Connect to the peer's queue pair: RTR, then RTS (sending starts at our PSN)."""
        self.qp.to_rtr(remote, self.context.timeouts)
        self.qp.to_rts(self.psn, self.context.timeouts)
        self.state = state

    def _woken(self) -> None:
        self.cq.acknowledge()
        if self.state != "closed":
            self.cq.arm()
            self.poll()

    def poll(self) -> None:
        """Handle every completion waiting (I/O thread)."""
        while self.state != "closed":
            try:
                batch = self.cq.poll(POLL_BATCH)
            except DeviceError as exc:
                self.broken(f"polling its completion queue failed: {exc}")
                return
            for completion in batch:
                if self.state == "closed":
                    return
                self.completed(completion)
            if len(batch) < POLL_BATCH:
                return

    def completed(self, completion: Completion) -> None:
        """A work request of this channel ended."""

    def broken(self, reason: str) -> None:
        """The queue pair failed: close it (subclasses say who must know)."""
        log.warning(
            "verbs: proc %s: the %s to %s failed: %s", self.context.proc, self, self.peer, reason
        )
        self.close()

    def close(self) -> None:
        """To ERR, then destroyed: from then on the device touches none of its memory."""
        if self.state == "closed":
            return
        self.state = "closed"
        if self._fd is not None:
            self.context.io.remove_reader(self._fd)
        try:
            self.qp.to_error()
            self.qp.close()
        finally:
            self.cq.close()

    def __str__(self) -> str:
        return f"{self.kind} (generation {self.generation})"
