"""The device interface over the emulated NIC (`danaus.transports.verbs.emulated.nic`)."""

from __future__ import annotations

import contextlib
import os
import secrets
from typing import Any

from danaus.transports.verbs.device import (
    Access,
    Completion,
    CompletionQueue,
    Device,
    DeviceError,
    Endpoint,
    MemoryRegion,
    PortInfo,
    QpState,
    QueuePair,
    Timeouts,
    WrOpcode,
)
from danaus.transports.verbs.emulated.nic import Nic
from danaus.transports.verbs.emulated.state import (
    Counters,
    Cq,
    Qp,
    Receive,
    Region,
    SendRequest,
)

MTU_4096 = 5
MAX_MESSAGE = 1 << 30


class EmulatedCompletionQueue(CompletionQueue):
    """A completion queue whose events arrive on an eventfd (or, with ``events=False``, none)."""

    def __init__(self, nic: Nic, depth: int, events: bool) -> None:
        self._nic = nic
        self._fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC) if events else None
        self.state = Cq(depth, self._notify)

    def _notify(self) -> None:
        if self._fd is not None:
            os.eventfd_write(self._fd, 1)

    def fileno(self) -> int | None:
        return self._fd

    def arm(self) -> None:
        self._nic.arm(self.state)

    def acknowledge(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(BlockingIOError):
                os.eventfd_read(self._fd)

    def poll(self, count: int) -> list[Completion]:
        return self._nic.poll(self.state, count)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class EmulatedQueuePair(QueuePair):
    def __init__(self, nic: Nic, qp: Qp) -> None:
        self._nic = nic
        self._qp = qp
        self.number = qp.number

    @property
    def state(self) -> QpState:
        return self._qp.state

    def to_init(self, access: Access) -> None:
        self._nic.to_init(self._qp, access)

    def to_rtr(self, remote: Endpoint, timeouts: Timeouts) -> None:
        self._nic.to_rtr(self._qp, remote.gid, remote.qpn, remote.psn, timeouts)

    def to_rts(self, psn: int, timeouts: Timeouts) -> None:
        self._nic.to_rts(self._qp, psn, timeouts)

    def to_error(self) -> None:
        self._nic.to_error(self._qp)

    def post_recv(self, wr_id: int, address: int, length: int, lkey: int) -> None:
        self._nic.post_recv(self._qp, Receive(wr_id, address, length, lkey))

    def post_send(
        self,
        wr_id: int,
        opcode: WrOpcode,
        address: int,
        length: int,
        lkey: int,
        remote_address: int = 0,
        rkey: int = 0,
    ) -> None:
        rnr_left = self._qp.timeouts.rnr_retry
        request = SendRequest(wr_id, opcode, address, length, lkey, remote_address, rkey, rnr_left)
        if length > MAX_MESSAGE:
            raise DeviceError(f"a work request of {length} bytes (at most {MAX_MESSAGE})")
        self._nic.post_send(self._qp, request)

    def close(self) -> None:
        self._nic.remove_qp(self._qp)


class EmulatedDevice(Device):
    """An RC device emulated by a thread of this process, reached by other processes' devices
    over Unix sockets. A test facility: nothing here touches RDMA hardware.

    ``events=False`` gives completion queues without an event descriptor, so the
    transport polls them on a timer (as it does on a device whose pyverbs
    cannot wait for completion events).
    """

    def __init__(self, name: str = "emulated0", *, events: bool = True) -> None:
        gid = bytes.fromhex("fe800000000000000000") + secrets.token_bytes(6)
        self._nic = Nic(gid)
        self._events = events
        self.port = PortInfo(
            device=name,
            port=1,
            gid_index=0,
            lid=int.from_bytes(gid[-2:], "big") or 1,
            gid=gid,
            mtu=MTU_4096,
            max_message=MAX_MESSAGE,
            link_layer="emulated",
        )

    @property
    def counters(self) -> Counters:
        """What the device did: receiver-not-ready and remote access answers, retransmissions."""
        return self._nic.counters

    def unanswered(self) -> int:
        """Send work requests posted on this device and not completed yet."""
        with self._nic.lock:
            return sum(len(qp.send_queue) + len(qp.in_flight) for qp in self._nic.qps.values())

    def register(self, address: int, length: int, access: Access, keep: Any) -> MemoryRegion:
        lkey = self._nic.new_key()
        rkey = self._nic.new_key()
        while rkey == lkey:
            rkey = self._nic.new_key()
        region = Region(address, length, access, lkey, rkey, keep)
        self._nic.add_region(region)
        return MemoryRegion(address, length, region.lkey, region.rkey, address, region)

    def deregister(self, region: MemoryRegion) -> None:
        self._nic.remove_region(region.handle)

    def completion_queue(self, depth: int) -> EmulatedCompletionQueue:
        return EmulatedCompletionQueue(self._nic, depth, self._events)

    def queue_pair(self, cq: CompletionQueue, max_send: int, max_recv: int) -> EmulatedQueuePair:
        assert isinstance(cq, EmulatedCompletionQueue)
        return EmulatedQueuePair(self._nic, self._nic.add_qp(cq.state, max_send, max_recv))

    def close(self) -> None:
        self._nic.close()
