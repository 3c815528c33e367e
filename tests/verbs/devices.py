"""Helpers for tests that drive verbs devices directly."""

from __future__ import annotations

import ctypes
import select
import time
from dataclasses import dataclass

from danaus.transports.verbs.device import (
    REMOTE,
    Access,
    Completion,
    CompletionQueue,
    Device,
    Endpoint,
    MemoryRegion,
    QueuePair,
    Timeouts,
)

FAST = Timeouts(timeout=12, retry_count=7, rnr_retry=7, min_rnr_timer=1)
"""About 17 ms per try and eight tries: a silent peer fails a request within 0.15 s, and a live
one whose device thread waits for a CPU (two test workers on two cores) has as long to answer."""


def wait_for(cq: CompletionQueue, count: int = 1, timeout: float = 10.0) -> list[Completion]:
    """The next ``count`` completions of ``cq``, waiting on its event descriptor."""
    found: list[Completion] = []
    deadline = time.monotonic() + timeout
    while len(found) < count:
        found += cq.poll(count - len(found))
        if len(found) >= count:
            break
        cq.arm()
        found += cq.poll(count - len(found))
        if len(found) >= count:
            break
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"{len(found)} of {count} completions after {timeout} s")
        fd = cq.fileno()
        assert fd is not None
        if select.select([fd], [], [], left)[0]:
            cq.acknowledge()
    return found


def wait_until(condition, timeout: float = 10.0, what: str = "a condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {what} within {timeout} s")
        time.sleep(0.001)


@dataclass
class Side:
    """One end of a connected pair: its device, completion queue, queue pair and memory."""

    device: Device
    cq: CompletionQueue
    qp: QueuePair
    memory: bytearray
    region: MemoryRegion
    psn: int

    @property
    def address(self) -> int:
        return self.region.address

    def endpoint(self) -> Endpoint:
        port = self.device.port
        return Endpoint(port.lid, port.gid, self.qp.number, self.psn, port.mtu)


def side(device: Device, size: int = 1 << 16, access: Access = REMOTE, psn: int = 100) -> Side:
    cq = device.completion_queue(256)
    qp = device.queue_pair(cq, 64, 64)
    memory = bytearray(size)
    address = ctypes.addressof(ctypes.c_char.from_buffer(memory))
    region = device.register(address, size, access, memory)
    return Side(device, cq, qp, memory, region, psn)


def connect(a: Side, b: Side, timeouts: Timeouts = FAST) -> None:
    for one, other in ((a, b), (b, a)):
        one.qp.to_init(REMOTE)
        one.qp.to_rtr(other.endpoint(), timeouts)
        one.qp.to_rts(one.psn, timeouts)
