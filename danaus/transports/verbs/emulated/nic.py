"""The emulated NIC: a thread of its process that plays an RDMA device's part.

It keeps what a device keeps (`danaus.transports.verbs.emulated.state`) and
does what a reliable-connected device does on the wire
(`danaus.transports.verbs.emulated.links`): it sends each posted request
with a packet sequence number, keeps it until the responder answers, sends it
again when no answer comes within the ACK timeout (and fails it with
``RETRY_EXC_ERR`` after ``retry_count`` tries), waits and retries when the
responder answers receiver-not-ready (``RNR_RETRY_EXC_ERR`` once
``rnr_retry`` is spent), and moves a queue pair to the error state on a
remote access error or an invalid request, on both sides, flushing what is
outstanding. As responder it checks every key, range and access flag before it
touches memory, and it reads and writes registered memory itself: the
process's other threads take no part in a transfer.

Unlike a NIC it runs in its process, so it stops when the process is paused,
and it needs the GIL. All its state is guarded by one lock, taken by the
thread and by the device calls of the process.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import random
import selectors
import threading
import time

from danaus.transports.verbs.device import (
    RNR_DELAYS_MS,
    Access,
    Completion,
    DeviceError,
    QpState,
    Timeouts,
    WcOpcode,
    WcStatus,
    WrOpcode,
    ack_timeout,
)
from danaus.transports.verbs.emulated.links import Link, Links
from danaus.transports.verbs.emulated.state import (
    INFINITE_RNR_RETRY,
    Counters,
    Cq,
    Qp,
    Receive,
    Region,
    SendRequest,
    completion_opcode,
    memory_at,
)
from danaus.transports.verbs.emulated.wire import Header, Kind, Nak

log = logging.getLogger("danaus.verbs.emulated")


class Nic:
    """One emulated device's engine: its state, its socket and the thread that serves it."""

    def __init__(self, gid: bytes) -> None:
        self.gid = gid
        self.lock = threading.RLock()
        self.counters = Counters()
        self.regions: dict[int, Region] = {}
        self._by_lkey: dict[int, Region] = {}
        self.qps: dict[int, Qp] = {}
        self._selector = selectors.DefaultSelector()
        self._links = Links(gid, self._selector, self._arrived)
        self._doorbell = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._rung = False
        self._selector.register(self._doorbell, selectors.EVENT_READ, self._answer_doorbell)
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="danaus-verbs-nic", daemon=True)
        self._thread.start()

    def new_key(self) -> int:
        while True:
            key = random.getrandbits(32)
            if key and key not in self.regions and key not in self._by_lkey:
                return key

    def add_region(self, region: Region) -> None:
        with self.lock:
            self.regions[region.rkey] = region
            self._by_lkey[region.lkey] = region

    def remove_region(self, region: Region) -> None:
        with self.lock:
            self.regions.pop(region.rkey, None)
            self._by_lkey.pop(region.lkey, None)

    def add_qp(self, cq: Cq, max_send: int, max_recv: int) -> Qp:
        with self.lock:
            while True:
                number = random.randrange(1, 1 << 24)
                if number not in self.qps:
                    qp = self.qps[number] = Qp(number, cq, max_send, max_recv)
                    return qp

    def remove_qp(self, qp: Qp) -> None:
        with self.lock:
            self.qps.pop(qp.number, None)

    def to_init(self, qp: Qp, access: Access) -> None:
        with self.lock:
            self._require(qp, QpState.RESET, "INIT")
            qp.access = access
            qp.state = QpState.INIT

    def to_rtr(self, qp: Qp, gid: bytes, qpn: int, psn: int, timeouts: Timeouts) -> None:
        with self.lock:
            self._require(qp, QpState.INIT, "RTR")
            qp.remote_gid, qp.remote_qpn, qp.expected = gid, qpn, psn
            qp.timeouts = timeouts
            qp.state = QpState.RTR

    def to_rts(self, qp: Qp, psn: int, timeouts: Timeouts) -> None:
        with self.lock:
            self._require(qp, QpState.RTR, "RTS")
            qp.next_psn = psn
            qp.timeouts = timeouts
            qp.retries_left = timeouts.retry_count
            qp.state = QpState.RTS
        self._ring()

    def to_error(self, qp: Qp) -> None:
        with self.lock:
            self._error(qp)

    @staticmethod
    def _require(qp: Qp, state: QpState, target: str) -> None:
        if qp.state is not state:
            raise DeviceError(
                f"queue pair {qp.number} cannot move from {qp.state.name} to {target} "
                f"(modify_qp: {os.strerror(errno.EINVAL)})"
            )

    def post_recv(self, qp: Qp, receive: Receive) -> None:
        with self.lock:
            if qp.state is QpState.RESET:
                raise DeviceError(f"post_recv on queue pair {qp.number} in RESET")
            if len(qp.receives) >= qp.max_recv:
                raise DeviceError(f"post_recv: the receive queue of {qp.number} is full")
            qp.receives.append(receive)
            if qp.state is QpState.ERR:
                self._flush(qp)

    def post_send(self, qp: Qp, request: SendRequest) -> None:
        with self.lock:
            if qp.state in (QpState.RESET, QpState.INIT, QpState.RTR):
                raise DeviceError(f"post_send on queue pair {qp.number} in {qp.state.name}")
            if len(qp.send_queue) + len(qp.in_flight) >= qp.max_send:
                raise DeviceError(f"post_send: the send queue of {qp.number} is full")
            qp.send_queue.append(request)
            if qp.state is QpState.ERR:
                self._flush(qp)
                return
        self._ring()

    def poll(self, cq: Cq, count: int) -> list[Completion]:
        with self.lock:
            if cq.overrun:
                raise DeviceError("the completion queue overran: completions were lost")
            return [cq.entries.popleft() for _ in range(min(count, len(cq.entries)))]

    def arm(self, cq: Cq) -> None:
        with self.lock:
            cq.armed = True

    def close(self) -> None:
        with self.lock:
            self._closed = True
        self._ring()
        if threading.current_thread() is not self._thread:
            self._thread.join(5)

    def _ring(self) -> None:
        with self.lock:
            if self._rung or self._doorbell < 0:
                return
            self._rung = True
            os.eventfd_write(self._doorbell, 1)

    def _answer_doorbell(self, _: int) -> None:
        with contextlib.suppress(BlockingIOError):
            os.eventfd_read(self._doorbell)
        self._rung = False

    def _run(self) -> None:
        try:
            while True:
                with self.lock:
                    if self._closed:
                        return
                    timeout = self._next_timer()
                events = self._selector.select(timeout)
                with self.lock:
                    for key, mask in events:
                        key.data(mask)
                    for qp in list(self.qps.values()):
                        self._transmit(qp)
                    self._expire_timers()
        except Exception:
            log.exception("the emulated NIC stopped")
        finally:
            self._shut()

    def _shut(self) -> None:
        with self.lock:
            self._closed = True
            self._links.close()
            self._selector.close()
            os.close(self._doorbell)
            self._doorbell = -1

    def _next_timer(self) -> float | None:
        now = time.monotonic()
        due = [qp.deadline for qp in self.qps.values() if qp.deadline is not None]
        due += [
            qp.rnr_until for qp in self.qps.values() if qp.send_queue and qp.state is QpState.RTS
        ]
        return max(0.0, min(due) - now) if due else None

    def _transmit_packet(
        self, gid: bytes, header: Header, payload: memoryview | None = None
    ) -> None:
        if not self._links.send(gid, header, payload):
            self.counters.packets_dropped += 1

    def _arrived(self, link: Link, header: Header) -> None:
        qp = self.qps.get(header.dst_qpn)
        ours = qp is not None and qp.remote_gid == link.gid and qp.remote_qpn == header.src_qpn
        length = header.length if header.has_payload else 0
        if not ours or qp is None:
            self.counters.packets_dropped += 1
            self._links.expect_payload(link, length, None)
        elif header.kind in (Kind.SEND, Kind.WRITE, Kind.READ):
            if qp.state in (QpState.RTR, QpState.RTS):
                self._request(link, qp, header)
            else:
                self.counters.packets_dropped += 1
                self._links.expect_payload(link, length, None)
        elif qp.state is QpState.RTS and qp.in_flight and qp.in_flight[0].psn == header.psn:
            self._response(link, qp, header)
        else:
            self._links.expect_payload(link, length, None)

    def _answer(self, qp: Qp, kind: Kind, psn: int, nak: int = 0, code: int = 0) -> None:
        self._transmit_packet(qp.remote_gid, Header(kind, qp.number, qp.remote_qpn, psn, nak, code))

    def _request(self, link: Link, qp: Qp, header: Header) -> None:
        kind, psn = header.kind, header.psn
        length = header.length if kind is not Kind.READ else 0
        if psn > qp.expected:
            self._links.expect_payload(link, length, None)
            return
        if psn < qp.expected and kind is not Kind.READ:
            self._links.expect_payload(link, length, None, lambda: self._answer(qp, Kind.ACK, psn))
            return
        if kind is Kind.SEND:
            self._receive_send(link, qp, header)
            return
        wanted = Access.REMOTE_WRITE if kind is Kind.WRITE else Access.REMOTE_READ
        region = self.regions.get(header.rkey)
        if (
            region is None
            or not region.covers(header.address, header.length)
            or not region.access & wanted
            or not qp.access & wanted
        ):
            self.counters.access_naks_sent += 1
            self._links.expect_payload(link, length, None)
            self._error(qp)  # before the NAK: whoever hears it finds this side failed already
            self._answer(qp, Kind.NAK, psn, Nak.REMOTE_ACCESS)
            return
        memory = memory_at(header.address, header.length, region.keep)
        if kind is Kind.READ:
            if psn == qp.expected:
                qp.expected += 1
            response = Header(
                Kind.READ_RESPONSE, qp.number, qp.remote_qpn, psn, length=header.length
            )
            self._transmit_packet(qp.remote_gid, response, memory)
            return

        def written() -> None:
            if qp.state in (QpState.RTR, QpState.RTS):
                qp.expected += 1
                self._answer(qp, Kind.ACK, psn)

        def wanted() -> bool:
            return qp.state is not QpState.ERR and self.regions.get(header.rkey) is region

        self._links.expect_payload(link, length, memory, written, wanted)

    def _receive_send(self, link: Link, qp: Qp, header: Header) -> None:
        psn = header.psn
        if not qp.receives:
            self.counters.rnr_naks_sent += 1
            self._links.expect_payload(link, header.length, None)
            self._answer(qp, Kind.NAK, psn, Nak.RECEIVER_NOT_READY, qp.timeouts.min_rnr_timer)
            return
        receive = qp.receives.popleft()
        memory = self._local(receive.lkey, receive.address, receive.length, write=True)
        if memory is None or header.length > receive.length:
            status = WcStatus.LOC_PROT_ERR if memory is None else WcStatus.LOC_LEN_ERR
            self._complete(qp, receive.wr_id, status, WcOpcode.RECV, 0)
            self._links.expect_payload(link, header.length, None)
            self._answer(qp, Kind.NAK, psn, Nak.INVALID_REQUEST)
            self._error(qp)
            return

        def received() -> None:
            if qp.state in (QpState.RTR, QpState.RTS):
                qp.expected += 1
                self._complete(qp, receive.wr_id, WcStatus.SUCCESS, WcOpcode.RECV, header.length)
                self._answer(qp, Kind.ACK, psn)

        def wanted() -> bool:
            return qp.state is not QpState.ERR and receive.lkey in self._by_lkey

        self._links.expect_payload(link, header.length, memory[: header.length], received, wanted)

    def _response(self, link: Link, qp: Qp, header: Header) -> None:
        request = qp.in_flight[0]
        self._progress(qp)
        if header.kind is Kind.READ_RESPONSE:
            memory = None
            if request.opcode is WrOpcode.RDMA_READ and header.length == request.length:
                memory = self._local(request.lkey, request.address, request.length, write=True)
            if memory is None:
                self._links.expect_payload(link, header.length, None)
                self._fail(qp, WcStatus.LOC_PROT_ERR)
                return

            def wanted() -> bool:
                if qp.state is not QpState.RTS or not qp.in_flight:
                    return False
                self._progress(qp)
                return qp.in_flight[0] is request and request.lkey in self._by_lkey

            self._links.expect_payload(
                link, header.length, memory, lambda: self._done(qp, request), wanted
            )
        elif header.kind is Kind.ACK:
            if request.opcode is not WrOpcode.RDMA_READ:
                self._done(qp, request)
        elif header.nak == Nak.RECEIVER_NOT_READY:
            if qp.timeouts.rnr_retry != INFINITE_RNR_RETRY:
                if request.rnr_left == 0:
                    self._fail(qp, WcStatus.RNR_RETRY_EXC_ERR)
                    return
                request.rnr_left -= 1
            self._rewind(qp, RNR_DELAYS_MS[header.code % len(RNR_DELAYS_MS)] / 1000)
        elif header.nak == Nak.REMOTE_ACCESS:
            self._fail(qp, WcStatus.REM_ACCESS_ERR)
        else:
            self._fail(qp, WcStatus.REM_INV_REQ_ERR)

    def _progress(self, qp: Qp) -> None:
        qp.retries_left = qp.timeouts.retry_count
        qp.deadline = time.monotonic() + ack_timeout(qp.timeouts)

    def _done(self, qp: Qp, request: SendRequest) -> None:
        if qp.state is not QpState.RTS or not qp.in_flight or qp.in_flight[0] is not request:
            return
        qp.in_flight.popleft()
        if not qp.in_flight:
            qp.deadline = None
        opcode = completion_opcode(request)
        self._complete(qp, request.wr_id, WcStatus.SUCCESS, opcode, request.length)

    def _transmit(self, qp: Qp) -> None:
        if qp.state is not QpState.RTS or time.monotonic() < qp.rnr_until:
            return
        while qp.send_queue:
            request = qp.send_queue.popleft()
            request.psn = qp.next_psn
            qp.next_psn += 1
            qp.in_flight.append(request)
            write = request.opcode is WrOpcode.RDMA_READ
            memory = self._local(request.lkey, request.address, request.length, write=write)
            if memory is None:
                self._fail(qp, WcStatus.LOC_PROT_ERR, request)
                return
            kind = {
                WrOpcode.SEND: Kind.SEND,
                WrOpcode.RDMA_WRITE: Kind.WRITE,
                WrOpcode.RDMA_READ: Kind.READ,
            }[request.opcode]
            header = Header(
                kind,
                qp.number,
                qp.remote_qpn,
                request.psn,
                address=request.remote_address,
                rkey=request.rkey,
                length=request.length,
            )
            self._transmit_packet(qp.remote_gid, header, None if write else memory)
            if qp.deadline is None:
                qp.deadline = time.monotonic() + ack_timeout(qp.timeouts)

    def _rewind(self, qp: Qp, delay: float) -> None:
        """Send everything unanswered again, from the oldest, after ``delay`` seconds."""
        if not qp.in_flight:
            return
        qp.next_psn = qp.in_flight[0].psn
        qp.send_queue.extendleft(reversed(qp.in_flight))
        qp.in_flight.clear()
        qp.deadline = None
        qp.rnr_until = time.monotonic() + delay

    def _expire_timers(self) -> None:
        now = time.monotonic()
        for qp in list(self.qps.values()):
            if qp.deadline is None or now < qp.deadline or qp.state is not QpState.RTS:
                continue
            wait = ack_timeout(qp.timeouts)
            if self._links.busy_towards(qp.remote_gid, wait):
                qp.deadline = now + wait
            elif qp.retries_left == 0:
                self._fail(qp, WcStatus.RETRY_EXC_ERR)
            else:
                qp.retries_left -= 1
                self.counters.retransmissions += 1
                self._rewind(qp, 0.0)
                self._transmit(qp)

    def _local(self, lkey: int, address: int, length: int, write: bool) -> memoryview | None:
        region = self._by_lkey.get(lkey)
        if region is None or not region.covers(address, length):
            return None
        if write and not region.access & Access.LOCAL_WRITE:
            return None
        return memory_at(address, length, region.keep)

    def _complete(
        self, qp: Qp, wr_id: int, status: WcStatus, opcode: WcOpcode, length: int
    ) -> None:
        cq = qp.cq
        if len(cq.entries) >= cq.depth:
            cq.overrun = True
            return
        cq.entries.append(Completion(wr_id, status, opcode, length, qp.number))
        if cq.armed:
            cq.armed = False
            cq.notify()

    def _fail(self, qp: Qp, status: WcStatus, request: SendRequest | None = None) -> None:
        """``request`` (default: the oldest unanswered) failed with ``status``; the QP errs."""
        failed = request if request is not None else qp.in_flight[0]
        for each in list(qp.in_flight):
            if each is failed:
                break
            self._complete(qp, each.wr_id, WcStatus.WR_FLUSH_ERR, completion_opcode(each), 0)
            qp.in_flight.remove(each)
        qp.in_flight.remove(failed)
        self._complete(qp, failed.wr_id, status, completion_opcode(failed), 0)
        self._error(qp)

    def _error(self, qp: Qp) -> None:
        if qp.state is QpState.ERR:
            return
        qp.state = QpState.ERR
        qp.deadline = None
        self._flush(qp)

    def _flush(self, qp: Qp) -> None:
        for request in [*qp.in_flight, *qp.send_queue]:
            self._complete(qp, request.wr_id, WcStatus.WR_FLUSH_ERR, completion_opcode(request), 0)
        qp.in_flight.clear()
        qp.send_queue.clear()
        for receive in qp.receives:
            self._complete(qp, receive.wr_id, WcStatus.WR_FLUSH_ERR, WcOpcode.RECV, 0)
        qp.receives.clear()
