"""The narrow interface through which the verbs transport drives an RDMA device.

Everything the transport asks of a device is here: open it, register memory,
make completion queues and reliable-connected queue pairs, move a queue pair
through its states (RESET, INIT, RTR, RTS, and ERR), post work requests and
poll their completions. Two providers implement it: `danaus.transports.verbs.hardware`
over pyverbs (a real NIC) and `danaus.transports.verbs.emulated` (an RC device
emulated between processes, for tests). Numbers (states, statuses, opcodes,
access flags) are libibverbs' own, so a provider passes them through.
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Annotated, Any

import msgspec


class QpState(enum.IntEnum):
    """``enum ibv_qp_state``."""

    RESET = 0
    INIT = 1
    RTR = 2
    RTS = 3
    SQD = 4
    SQE = 5
    ERR = 6


class WcStatus(enum.IntEnum):
    """``enum ibv_wc_status``: how a work request ended."""

    SUCCESS = 0
    LOC_LEN_ERR = 1
    LOC_QP_OP_ERR = 2
    LOC_EEC_OP_ERR = 3
    LOC_PROT_ERR = 4
    WR_FLUSH_ERR = 5
    MW_BIND_ERR = 6
    BAD_RESP_ERR = 7
    LOC_ACCESS_ERR = 8
    REM_INV_REQ_ERR = 9
    REM_ACCESS_ERR = 10
    REM_OP_ERR = 11
    RETRY_EXC_ERR = 12
    RNR_RETRY_EXC_ERR = 13
    LOC_RDD_VIOL_ERR = 14
    REM_INV_RD_REQ_ERR = 15
    REM_ABORT_ERR = 16
    INV_EECN_ERR = 17
    INV_EEC_STATE_ERR = 18
    FATAL_ERR = 19
    RESP_TIMEOUT_ERR = 20
    GENERAL_ERR = 21


class WcOpcode(enum.IntEnum):
    """``enum ibv_wc_opcode``: what a completed work request was."""

    SEND = 0
    RDMA_WRITE = 1
    RDMA_READ = 2
    RECV = 128


class WrOpcode(enum.IntEnum):
    """``enum ibv_wr_opcode``: what a send work request asks for."""

    RDMA_WRITE = 0
    SEND = 2
    RDMA_READ = 4


class Access(enum.IntFlag):
    """``enum ibv_access_flags``: what may be done to a memory region or through a queue pair."""

    NONE = 0
    LOCAL_WRITE = 1
    REMOTE_WRITE = 2
    REMOTE_READ = 4


REMOTE = Access.LOCAL_WRITE | Access.REMOTE_READ | Access.REMOTE_WRITE
"""Access for memory others read and write (registered buffers)."""


class DeviceError(RuntimeError):
    """A device call failed (a verbs call returned an error)."""


class NoDeviceError(RuntimeError):
    """No RDMA device can be used: the one sentence says why and what to do instead."""


class Endpoint(msgspec.Struct, frozen=True, array_like=True):
    """What the other side of a queue pair needs to connect to it (exchanged over tcp's control).

    ``lid`` routes on InfiniBand; ``gid`` (16 bytes) routes on RoCE and across
    subnets. ``psn`` is the first packet sequence number this side sends.
    """

    lid: Annotated[int, msgspec.Meta(ge=0, lt=1 << 16)]
    gid: Annotated[bytes, msgspec.Meta(min_length=16, max_length=16)]
    qpn: Annotated[int, msgspec.Meta(ge=0, lt=1 << 24)]
    psn: Annotated[int, msgspec.Meta(ge=0, lt=1 << 24)]
    mtu: Annotated[int, msgspec.Meta(ge=1, le=5)]


@dataclass(frozen=True)
class PortInfo:
    """The port a device was opened on, as the transport needs it."""

    device: str
    port: int
    gid_index: int
    lid: int
    gid: bytes
    mtu: int
    """``enum ibv_mtu`` of the port's active MTU."""
    max_message: int
    """The largest message (and RDMA transfer) one work request may carry."""
    link_layer: str

    def describe(self) -> str:
        return f"{self.device} port {self.port} (gid {self.gid.hex()}, lid {self.lid})"


@dataclass(frozen=True)
class Completion:
    """One polled work completion."""

    wr_id: int
    status: WcStatus
    opcode: WcOpcode
    byte_len: int
    qp_num: int


@dataclass(frozen=True)
class MemoryRegion:
    """Registered memory: ``address`` is where it starts in this process, ``iova`` the address
    work requests use for that byte (the same for ordinary memory; a dma-buf offset for GPU
    memory registered through dma-buf)."""

    address: int
    length: int
    lkey: int
    rkey: int
    iova: int
    handle: Any
    """The provider's own object, released by `Device.deregister`."""

    def translate(self, address: int) -> int:
        """The address work requests use for ``address`` inside this region."""
        return self.iova + (address - self.address)


@dataclass(frozen=True)
class Timeouts:
    """How long a queue pair waits for answers before it gives up (``ibv_qp_attr`` fields).

    ``timeout`` is the exponent of the ACK timeout (4.096 µs * 2^timeout);
    ``retry_count`` how many times an unanswered request is sent again before
    the work request fails with ``RETRY_EXC_ERR``; ``rnr_retry`` how many times
    a receiver-not-ready answer is retried (7: forever); ``min_rnr_timer`` the
    code of the delay this side asks senders to wait after it answered
    receiver-not-ready.
    """

    timeout: int = 18
    retry_count: int = 7
    rnr_retry: int = 7
    min_rnr_timer: int = 12


class CompletionQueue(ABC):
    """A completion queue, with a completion channel to wait on."""

    @abstractmethod
    def fileno(self) -> int | None:
        """A descriptor readable after `arm` once a completion arrives; None: poll on a timer."""

    @abstractmethod
    def arm(self) -> None:
        """Ask for one event on the descriptor at the next completion (``ibv_req_notify_cq``)."""

    @abstractmethod
    def acknowledge(self) -> None:
        """Consume the event that made the descriptor readable (``ibv_get_cq_event`` and ack)."""

    @abstractmethod
    def poll(self, count: int) -> list[Completion]:
        """Up to ``count`` completions, oldest first; [] when there are none."""

    @abstractmethod
    def close(self) -> None: ...


class QueuePair(ABC):
    """A reliable-connected queue pair."""

    number: int

    @property
    @abstractmethod
    def state(self) -> QpState: ...

    @abstractmethod
    def to_init(self, access: Access) -> None:
        """RESET to INIT, allowing the remote side ``access`` through this queue pair."""

    @abstractmethod
    def to_rtr(self, remote: Endpoint, timeouts: Timeouts) -> None:
        """INIT to RTR: connected to ``remote``, ready to receive."""

    @abstractmethod
    def to_rts(self, psn: int, timeouts: Timeouts) -> None:
        """RTR to RTS: ready to send, starting at packet sequence number ``psn``."""

    @abstractmethod
    def to_error(self) -> None:
        """Any state to ERR: outstanding work requests complete with ``WR_FLUSH_ERR``."""

    @abstractmethod
    def post_recv(self, wr_id: int, address: int, length: int, lkey: int) -> None: ...

    @abstractmethod
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
        """Post a signaled SEND, RDMA READ or RDMA WRITE of one scatter-gather element."""

    @abstractmethod
    def close(self) -> None: ...


class Device(ABC):
    """An opened device: one port, one protection domain."""

    port: PortInfo
    memory_kinds: frozenset[str] = frozenset({"cpu"})
    """The kinds of memory it can register (``cpu``, ``cuda``)."""

    @abstractmethod
    def register(self, address: int, length: int, access: Access, keep: Any) -> MemoryRegion:
        """Register ``length`` bytes at ``address`` of this process (``keep`` keeps them alive)."""

    def register_dmabuf(
        self, fd: int, offset: int, length: int, address: int, access: Access
    ) -> MemoryRegion:
        """Register ``length`` bytes at ``offset`` of dma-buf ``fd``, mapped at ``address``."""
        raise DeviceError("this device cannot register dma-buf memory")

    @abstractmethod
    def deregister(self, region: MemoryRegion) -> None: ...

    @abstractmethod
    def completion_queue(self, depth: int) -> CompletionQueue: ...

    @abstractmethod
    def queue_pair(self, cq: CompletionQueue, max_send: int, max_recv: int) -> QueuePair: ...

    @abstractmethod
    def close(self) -> None: ...


def ack_timeout(timeouts: Timeouts) -> float:
    """Seconds a queue pair waits for an answer before it sends again."""
    return 4.096e-6 * (1 << timeouts.timeout)


RNR_DELAYS_MS = (
    655.36, 0.01, 0.02, 0.03, 0.04, 0.06, 0.08, 0.12, 0.16, 0.24, 0.32, 0.48, 0.64, 0.96,
    1.28, 1.92, 2.56, 3.84, 5.12, 7.68, 10.24, 15.36, 20.48, 30.72, 40.96, 61.44, 81.92,
    122.88, 163.84, 245.76, 327.68, 491.52,
)  # fmt: skip
"""Milliseconds of each ``min_rnr_timer`` code (the InfiniBand specification's table)."""
