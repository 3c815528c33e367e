"""What an emulated device keeps: memory regions, queue pairs, completion queues, counters."""

from __future__ import annotations

import ctypes
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from danaus.transports.verbs.device import (
    Access,
    Completion,
    QpState,
    Timeouts,
    WcOpcode,
    WrOpcode,
)

INFINITE_RNR_RETRY = 7


def memory_at(address: int, length: int, keep: Any) -> memoryview:
    """The ``length`` bytes at ``address`` of this process, as a writable view that keeps
    ``keep`` (what owns the memory) alive as long as it lives, queued or not."""
    array = (ctypes.c_char * length).from_address(address)
    array.keep = keep  # type: ignore[attr-defined]
    return memoryview(array).cast("B")


@dataclass
class Counters:
    """What the device did that tests look at."""

    rnr_naks_sent: int = 0
    access_naks_sent: int = 0
    retransmissions: int = 0
    packets_dropped: int = 0


@dataclass
class Region:
    address: int
    length: int
    access: Access
    lkey: int
    rkey: int
    keep: Any

    def covers(self, address: int, length: int) -> bool:
        return self.address <= address and address + length <= self.address + self.length


@dataclass
class SendRequest:
    wr_id: int
    opcode: WrOpcode
    address: int
    length: int
    lkey: int
    remote_address: int
    rkey: int
    rnr_left: int
    psn: int = -1


@dataclass
class Receive:
    wr_id: int
    address: int
    length: int
    lkey: int


@dataclass
class Cq:
    """A completion queue's state; ``notify`` is called when an armed queue gets a completion."""

    depth: int
    notify: Callable[[], None]
    entries: deque[Completion] = field(default_factory=deque)
    armed: bool = False
    overrun: bool = False


@dataclass
class Qp:
    number: int
    cq: Cq
    max_send: int
    max_recv: int
    state: QpState = QpState.RESET
    access: Access = Access.NONE
    remote_gid: bytes = b""
    remote_qpn: int = 0
    timeouts: Timeouts = field(default_factory=Timeouts)
    expected: int = 0
    """Responder: the next request's PSN."""
    next_psn: int = 0
    send_queue: deque[SendRequest] = field(default_factory=deque)
    in_flight: deque[SendRequest] = field(default_factory=deque)
    receives: deque[Receive] = field(default_factory=deque)
    retries_left: int = 0
    deadline: float | None = None
    rnr_until: float = 0.0


def completion_opcode(request: SendRequest) -> WcOpcode:
    return {
        WrOpcode.SEND: WcOpcode.SEND,
        WrOpcode.RDMA_WRITE: WcOpcode.RDMA_WRITE,
        WrOpcode.RDMA_READ: WcOpcode.RDMA_READ,
    }[request.opcode]
