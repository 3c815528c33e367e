"""The device interface over pyverbs: RDMA hardware (InfiniBand, RoCE) through rdma-core.

pyverbs is imported here only, when the ``pyverbs`` provider is chosen, so
Danaus imports without it. `check` turns what pyverbs and the kernel say
about a host without a usable device into one sentence; `open_device` opens
the device and port the settings choose (`danaus.transports.verbs.providers`).

Queue pairs are reliable-connected, routed with a global route header (the
port's GID at the chosen index; on InfiniBand the LID as well), the path MTU
the smaller of both sides' active MTUs, and as many outstanding RDMA reads as
the device allows. pyverbs shows the completion channel's descriptor from
rdma-core 45 on; before that the transport polls completion queues on a timer.
"""

from __future__ import annotations

import errno
from typing import Any

from danaus.core.settings import Settings
from danaus.transports.verbs.device import (
    Access,
    Completion,
    CompletionQueue,
    Device,
    DeviceError,
    Endpoint,
    MemoryRegion,
    NoDeviceError,
    PortInfo,
    QpState,
    QueuePair,
    Timeouts,
    WcOpcode,
    WcStatus,
    WrOpcode,
)

INSTEAD = (
    "use transport='tcp' or 'ucx' on this host, or set DANAUS_VERBS_PROVIDER=emulated "
    "to test with a device emulated between processes"
)
MAX_TRANSFER = 1 << 30
"""The largest work request posted, whatever larger messages the port allows."""
HOP_LIMIT = 255


def pyverbs() -> Any:
    """The pyverbs package, or ``ImportError`` with one sentence saying what to install."""
    try:
        import pyverbs.device
        import pyverbs.enums
        import pyverbs.pyverbs_error
    except ImportError as exc:
        raise ImportError(
            f"the verbs transport needs pyverbs, rdma-core's Python bindings ({exc}): "
            "install python3-pyverbs (Debian, Ubuntu) or rdma-core with its Python bindings, "
            f"or {INSTEAD}"
        ) from None
    return pyverbs


def _device_names() -> list[str]:
    verbs = pyverbs()
    try:
        found = verbs.device.get_device_list()
    except verbs.pyverbs_error.PyverbsError:
        found = []
    names = [d.name.decode() if isinstance(d.name, bytes) else str(d.name) for d in found]
    if not names:
        raise NoDeviceError(
            "no RDMA device found on this host (the kernel has no RDMA support, or no "
            f"RDMA NIC is present): {INSTEAD}"
        )
    return names


def _open_port(settings: Settings) -> tuple[Any, str, int, Any]:
    """The opened context, device name, port number and port attributes the settings choose."""
    verbs = pyverbs()
    names = _device_names()
    if settings.verbs_device is not None and settings.verbs_device not in names:
        raise NoDeviceError(
            f"no RDMA device named {settings.verbs_device!r} on this host (it has "
            f"{', '.join(names)}): set DANAUS_VERBS_DEVICE to one of them"
        )
    for name in [settings.verbs_device] if settings.verbs_device else names:
        try:
            context = verbs.device.Context(name=name)
        except verbs.pyverbs_error.PyverbsError:
            continue
        count = context.query_device().phys_port_cnt
        ports = [settings.verbs_port] if settings.verbs_port else range(1, count + 1)
        for port in ports:
            try:
                attributes = context.query_port(port)
            except verbs.pyverbs_error.PyverbsError:
                continue
            if attributes.state == verbs.enums.IBV_PORT_ACTIVE:
                return context, name, port, attributes
        context.close()
    device, port = settings.verbs_device, settings.verbs_port
    where = f"{device} port {port or 'any'}" if device else "any device"
    raise NoDeviceError(
        f"no active RDMA port on {where} (check the link with ibstat or rdma link, and on "
        f"InfiniBand that a subnet manager runs): {INSTEAD}"
    )


def check(settings: Settings) -> None:
    """Raise ``ImportError`` or `NoDeviceError` (one sentence) unless a port can be used."""
    context, _, _, _ = _open_port(settings)
    context.close()


def open_device(settings: Settings) -> HardwareDevice:
    context, name, port, attributes = _open_port(settings)
    return HardwareDevice(context, name, port, attributes, settings.verbs_gid_index)


def _gid_bytes(gid: Any) -> bytes:
    return bytes.fromhex(str(gid).replace(":", ""))


def _gid(raw: bytes) -> Any:
    from pyverbs.addr import GID

    text = raw.hex()
    return GID(":".join(text[i : i + 4] for i in range(0, 32, 4)))


def _default_gid_index(context: Any, port: int, attributes: Any) -> int:
    """On RoCE, a RoCE v2 GID of an IPv4 address (routable), else 0; on InfiniBand, 0."""
    verbs = pyverbs()
    if attributes.link_layer != verbs.enums.IBV_LINK_LAYER_ETHERNET:
        return 0
    for index in range(attributes.gid_tbl_len):
        try:
            raw = _gid_bytes(context.query_gid(port, index))
            kind = context.query_gid_type(port, index)
        except verbs.pyverbs_error.PyverbsError:
            continue
        ipv4 = raw[:10] == bytes(10) and raw[10:12] == b"\xff\xff"
        if ipv4 and kind == verbs.enums.IBV_GID_TYPE_SYSFS_ROCE_V2:
            return index
    return 0


def _errors() -> tuple[type[BaseException], ...]:
    return (pyverbs().pyverbs_error.PyverbsError,)


class HardwareCompletionQueue(CompletionQueue):
    def __init__(self, context: Any, depth: int) -> None:
        from pyverbs.cq import CQ, CompChannel

        try:
            self._channel = CompChannel(context)
            self.cq = CQ(context, depth, None, self._channel, 0)
        except _errors() as exc:
            raise DeviceError(f"creating a completion queue failed: {exc}") from None

    def fileno(self) -> int | None:
        return getattr(self._channel, "fd", None)

    def arm(self) -> None:
        self.cq.req_notify()

    def acknowledge(self) -> None:
        self._channel.get_cq_event(self.cq)
        self.cq.ack_events(1)

    def poll(self, count: int) -> list[Completion]:
        try:
            _, found = self.cq.poll(count)
        except _errors() as exc:
            raise DeviceError(str(exc)) from None
        return [
            Completion(
                wc.wr_id,
                WcStatus(wc.status),
                _opcode(wc.opcode),
                wc.byte_len,
                wc.qp_num,
            )
            for wc in found
        ]

    def close(self) -> None:
        self.cq.close()
        self._channel.close()


def _opcode(value: int) -> WcOpcode:
    """A completion's opcode (undefined by libibverbs for failed work requests: SEND then)."""
    try:
        return WcOpcode(value)
    except ValueError:
        return WcOpcode.SEND


class HardwareQueuePair(QueuePair):
    def __init__(self, device: HardwareDevice, qp: Any) -> None:
        self._device = device
        self._qp = qp
        self.number = qp.qp_num

    @property
    def state(self) -> QpState:
        enums = pyverbs().enums
        attributes, _ = self._qp.query(enums.IBV_QP_STATE)
        return QpState(attributes.qp_state)

    def _attributes(self) -> Any:
        import pyverbs.qp

        return pyverbs.qp.QPAttr(port_num=self._device.port.port)

    def to_init(self, access: Access) -> None:
        attributes = self._attributes()
        attributes.pkey_index = 0
        attributes.qp_access_flags = int(access)
        self._call(self._qp.to_init, attributes)

    def to_rtr(self, remote: Endpoint, timeouts: Timeouts) -> None:
        from pyverbs.addr import AHAttr, GlobalRoute

        port = self._device.port
        attributes = self._attributes()
        attributes.path_mtu = min(port.mtu, remote.mtu)
        attributes.dest_qp_num = remote.qpn
        attributes.rq_psn = remote.psn
        attributes.max_dest_rd_atomic = self._device.reads_served
        attributes.min_rnr_timer = timeouts.min_rnr_timer
        route = GlobalRoute(dgid=_gid(remote.gid), sgid_index=port.gid_index, hop_limit=HOP_LIMIT)
        attributes.ah_attr = AHAttr(dlid=remote.lid, port_num=port.port, is_global=1, gr=route)
        self._call(self._qp.to_rtr, attributes)

    def to_rts(self, psn: int, timeouts: Timeouts) -> None:
        attributes = self._attributes()
        attributes.sq_psn = psn
        attributes.timeout = timeouts.timeout
        attributes.retry_cnt = timeouts.retry_count
        attributes.rnr_retry = timeouts.rnr_retry
        attributes.max_rd_atomic = self._device.reads_issued
        self._call(self._qp.to_rts, attributes)

    def to_error(self) -> None:
        enums = pyverbs().enums
        attributes = self._attributes()
        attributes.qp_state = enums.IBV_QPS_ERR
        self._call(self._qp.modify, attributes, enums.IBV_QP_STATE)

    def post_recv(self, wr_id: int, address: int, length: int, lkey: int) -> None:
        from pyverbs.wr import SGE, RecvWR

        request = RecvWR(wr_id=wr_id, num_sge=1, sg=[SGE(address, length, lkey)])
        self._call(self._qp.post_recv, request)

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
        from pyverbs.wr import SGE, SendWR

        enums = pyverbs().enums
        request = SendWR(
            wr_id=wr_id,
            opcode=int(opcode),
            num_sge=1,
            sg=[SGE(address, length, lkey)],
            send_flags=enums.IBV_SEND_SIGNALED,
        )
        if opcode is not WrOpcode.SEND:
            request.set_wr_rdma(rkey, remote_address)
        self._call(self._qp.post_send, request)

    @staticmethod
    def _call(method: Any, *args: Any) -> None:
        try:
            method(*args)
        except _errors() as exc:
            raise DeviceError(str(exc)) from None

    def close(self) -> None:
        self._qp.close()


class HardwareDevice(Device):
    """An opened RDMA device: one port, one protection domain."""

    memory_kinds = frozenset({"cpu", "cuda"})

    def __init__(
        self, context: Any, name: str, port: int, attributes: Any, gid_index: int | None
    ) -> None:
        from pyverbs.pd import PD

        self._context = context
        self._pd = PD(context)
        index = (
            gid_index if gid_index is not None else _default_gid_index(context, port, attributes)
        )
        try:
            gid = _gid_bytes(context.query_gid(port, index))
        except _errors():
            raise NoDeviceError(
                f"RDMA device {name} port {port} has no GID at index {index}: "
                "set DANAUS_VERBS_GID_INDEX to a valid one (show_gids lists them)"
            ) from None
        capabilities = context.query_device()
        self.reads_served = max(1, capabilities.max_qp_rd_atom)
        self.reads_issued = max(1, capabilities.max_qp_init_rd_atom)
        ethernet = attributes.link_layer == pyverbs().enums.IBV_LINK_LAYER_ETHERNET
        link = "ethernet" if ethernet else "infiniband"
        self.port = PortInfo(
            device=name,
            port=port,
            gid_index=index,
            lid=attributes.lid,
            gid=gid,
            mtu=attributes.active_mtu,
            max_message=min(attributes.max_msg_sz, MAX_TRANSFER),
            link_layer=link,
        )

    def register(self, address: int, length: int, access: Access, keep: Any) -> MemoryRegion:
        from pyverbs.mr import MR

        try:
            region = MR(self._pd, length, int(access), address=address)
        except _errors() as exc:
            raise DeviceError(f"registering {length} bytes failed: {exc}") from None
        return MemoryRegion(address, length, region.lkey, region.rkey, address, (region, keep))

    def register_dmabuf(
        self, fd: int, offset: int, length: int, address: int, access: Access
    ) -> MemoryRegion:
        """pyverbs registers a dma-buf at I/O virtual address ``offset`` (its own choice)."""
        from pyverbs.mr import DmaBufMR

        try:
            region = DmaBufMR(self._pd, length, int(access), dmabuf=fd, offset=offset)
        except _errors() as exc:
            code = getattr(exc, "error_code", 0)
            raise DeviceError(
                f"registering {length} bytes of dma-buf memory failed: {exc}"
                + (" (not supported by this device or kernel)" if code == errno.EOPNOTSUPP else "")
            ) from None
        return MemoryRegion(address, length, region.lkey, region.rkey, offset, (region, None))

    def deregister(self, region: MemoryRegion) -> None:
        region.handle[0].close()

    def completion_queue(self, depth: int) -> HardwareCompletionQueue:
        return HardwareCompletionQueue(self._context, depth)

    def queue_pair(self, cq: CompletionQueue, max_send: int, max_recv: int) -> HardwareQueuePair:
        from pyverbs.qp import QP, QPCap, QPInitAttr

        assert isinstance(cq, HardwareCompletionQueue)
        enums = pyverbs().enums
        capacities = QPCap(
            max_send_wr=max_send, max_recv_wr=max_recv, max_send_sge=1, max_recv_sge=1
        )
        attributes = QPInitAttr(
            qp_type=enums.IBV_QPT_RC, scq=cq.cq, rcq=cq.cq, cap=capacities, sq_sig_all=1
        )
        try:
            return HardwareQueuePair(self, QP(self._pd, attributes))
        except _errors() as exc:
            raise DeviceError(f"creating a queue pair failed: {exc}") from None

    def close(self) -> None:
        self._pd.close()
        self._context.close()
