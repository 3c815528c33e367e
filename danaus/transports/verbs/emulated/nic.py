"""The emulated NIC: a thread of its process that plays an RDMA device's part.

It keeps what a device keeps (memory regions, queue pairs, completion queues)
and does what a reliable-connected device does on the wire: it sends each
posted request with a packet sequence number, keeps it until the responder
answers, sends it again when no answer comes within the ACK timeout (and fails
it with ``RETRY_EXC_ERR`` after ``retry_count`` tries), waits and retries when
the responder answers receiver-not-ready (``RNR_RETRY_EXC_ERR`` once
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
import ctypes
import errno
import functools
import logging
import os
import random
import selectors
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

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
from danaus.transports.verbs.emulated.wire import GID_BYTES, Header, Kind, Nak, socket_name

log = logging.getLogger("danaus.verbs.emulated")

SOCKET_BUFFER = 4 << 20
READS_PER_WAKE = 64
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


@dataclass
class _Link:
    """One socket to another device: ours to send on, or theirs that we receive on."""

    sock: socket.socket
    gid: bytes | None
    outgoing: deque[memoryview] = field(default_factory=deque)
    hello: bytearray = field(default_factory=lambda: bytearray(GID_BYTES))
    hello_filled: int = 0
    header: bytearray = field(default_factory=lambda: bytearray(Header.SIZE))
    header_filled: int = 0
    target: memoryview | None = None
    remaining: int = 0
    position: int = 0
    wanted: Callable[[], bool] = lambda: True
    done: Callable[[], None] | None = None
    last_progress: float = field(default_factory=time.monotonic)
    writing: bool = False


class Nic:
    """One emulated device's engine: its state, its socket and the thread that serves it."""

    def __init__(self, gid: bytes) -> None:
        self.gid = gid
        self.lock = threading.RLock()
        self.counters = Counters()
        self.regions: dict[int, Region] = {}
        self._by_lkey: dict[int, Region] = {}
        self.qps: dict[int, Qp] = {}
        self._links: dict[bytes, _Link] = {}
        """Our own connections, one per remote device: every packet we send goes on one."""
        self._scratch = memoryview(bytearray(1 << 16))
        self._selector = selectors.DefaultSelector()
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        self._listener.bind(socket_name(gid))
        self._listener.listen(256)
        self._listener.setblocking(False)
        self._selector.register(self._listener, selectors.EVENT_READ, self._accept)
        self._doorbell = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._rung = False
        self._selector.register(self._doorbell, selectors.EVENT_READ, self._answer_doorbell)
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="danaus-verbs-nic", daemon=True)
        self._thread.start()

    # ---- device calls (any thread) ------------------------------------------------------

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

    # ---- the thread -----------------------------------------------------------------------

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
            for link in list(self._links.values()):
                link.sock.close()
            for key in list(self._selector.get_map().values()):
                if isinstance(key.fileobj, socket.socket):
                    key.fileobj.close()
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

    # ---- links ----------------------------------------------------------------------------

    def _accept(self, _: int) -> None:
        for _ in range(READS_PER_WAKE):
            try:
                sock, _ = self._listener.accept()
            except BlockingIOError:
                return
            sock.setblocking(False)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SOCKET_BUFFER)
            link = _Link(sock, None)
            reader = functools.partial(self._reader, link)
            self._selector.register(sock, selectors.EVENT_READ, reader)

    def _link(self, gid: bytes) -> _Link | None:
        """Our connection to device ``gid``; None if no device answers there."""
        link = self._links.get(gid)
        if link is not None:
            return link
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SOCKET_BUFFER)
        try:
            sock.connect(socket_name(gid))
        except OSError:
            sock.close()
            return None
        sock.setblocking(False)
        link = self._links[gid] = _Link(sock, gid)
        link.outgoing.append(memoryview(self.gid))
        self._selector.register(sock, selectors.EVENT_READ, lambda m: self._io(link, m))
        return link

    def _reader(self, link: _Link, _: int) -> None:
        self._read(link)

    def _io(self, link: _Link, mask: int = selectors.EVENT_READ) -> None:
        if mask & selectors.EVENT_WRITE:
            self._flush_link(link)
        if mask & selectors.EVENT_READ and link.sock.fileno() >= 0:
            self._read(link)

    def _drop_link(self, link: _Link) -> None:
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(link.sock)
        link.sock.close()
        if link.gid is not None and self._links.get(link.gid) is link:
            del self._links[link.gid]

    def _send(self, gid: bytes, header: Header, payload: memoryview | None = None) -> None:
        link = self._link(gid)
        if link is None:
            self.counters.packets_dropped += 1
            return
        link.outgoing.append(memoryview(header.pack()))
        if payload is not None and payload.nbytes:
            link.outgoing.append(payload)
        self._flush_link(link)

    def _flush_link(self, link: _Link) -> None:
        while link.outgoing:
            try:
                sent = link.sock.send(link.outgoing[0])
            except BlockingIOError:
                break
            except OSError:
                self._drop_link(link)
                return
            link.last_progress = time.monotonic()
            if sent < link.outgoing[0].nbytes:
                link.outgoing[0] = link.outgoing[0][sent:]
            else:
                link.outgoing.popleft()
        wants = bool(link.outgoing)
        if wants != link.writing:
            link.writing = wants
            events = selectors.EVENT_READ | (selectors.EVENT_WRITE if wants else 0)
            self._selector.modify(link.sock, events, lambda m: self._io(link, m))

    def _read(self, link: _Link) -> None:
        for _ in range(READS_PER_WAKE):
            payload = link.gid is not None and link.remaining > 0
            try:
                if link.gid is None:
                    count = link.sock.recv_into(memoryview(link.hello)[link.hello_filled :])
                elif payload:
                    count = self._read_payload(link)
                else:
                    view = memoryview(link.header)[link.header_filled :]
                    count = link.sock.recv_into(view)
            except BlockingIOError:
                return
            except OSError:
                count = 0
            if count == 0:
                self._drop_link(link)
                return
            if link.gid is None:
                link.hello_filled += count
                if link.hello_filled == GID_BYTES:
                    link.gid = bytes(link.hello)
            elif payload:
                if not link.remaining:
                    done, link.done, link.target = link.done, None, None
                    if done is not None:
                        done()
            else:
                link.header_filled += count
                if link.header_filled == Header.SIZE:
                    link.header_filled = 0
                    try:
                        header = Header.unpack(link.header)
                    except ValueError:
                        log.error("emulated NIC: a malformed packet; the link is closed")
                        self._drop_link(link)
                        return
                    self._arrived(link, header)

    def _read_payload(self, link: _Link) -> int:
        if link.target is not None and not link.wanted():
            link.target = None
        if link.target is None:
            count = link.sock.recv_into(self._scratch[: link.remaining])
        else:
            count = link.sock.recv_into(link.target[link.position : link.position + link.remaining])
            link.position += count
        link.remaining -= count
        return count

    def _expect_payload(
        self,
        link: _Link,
        length: int,
        target: memoryview | None,
        done: Callable[[], None] | None = None,
        wanted: Callable[[], bool] = lambda: True,
    ) -> None:
        """Put the next ``length`` bytes in ``target`` (None: throw them away), then ``done``."""
        if not length:
            if done is not None:
                done()
            return
        link.target, link.remaining, link.position = target, length, 0
        link.wanted = wanted
        link.done = done

    # ---- packets --------------------------------------------------------------------------

    def _arrived(self, link: _Link, header: Header) -> None:
        qp = self.qps.get(header.dst_qpn)
        ours = qp is not None and qp.remote_gid == link.gid and qp.remote_qpn == header.src_qpn
        length = header.length if header.has_payload else 0
        if not ours or qp is None:
            self.counters.packets_dropped += 1
            self._expect_payload(link, length, None)
        elif header.kind in (Kind.SEND, Kind.WRITE, Kind.READ):
            if qp.state in (QpState.RTR, QpState.RTS):
                self._request(link, qp, header)
            else:
                self.counters.packets_dropped += 1
                self._expect_payload(link, length, None)
        elif qp.state is QpState.RTS and qp.in_flight and qp.in_flight[0].psn == header.psn:
            self._response(link, qp, header)
        else:
            self._expect_payload(link, length, None)

    def _answer(self, qp: Qp, kind: Kind, psn: int, nak: int = 0, code: int = 0) -> None:
        self._send(qp.remote_gid, Header(kind, qp.number, qp.remote_qpn, psn, nak, code))

    def _request(self, link: _Link, qp: Qp, header: Header) -> None:
        kind, psn = header.kind, header.psn
        length = header.length if kind is not Kind.READ else 0
        if psn > qp.expected:
            self._expect_payload(link, length, None)
            return
        if psn < qp.expected and kind is not Kind.READ:
            self._expect_payload(link, length, None, lambda: self._answer(qp, Kind.ACK, psn))
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
            self._expect_payload(link, length, None)
            self._answer(qp, Kind.NAK, psn, Nak.REMOTE_ACCESS)
            self._error(qp)
            return
        memory = memory_at(header.address, header.length, region.keep)
        if kind is Kind.READ:
            if psn == qp.expected:
                qp.expected += 1
            response = Header(
                Kind.READ_RESPONSE, qp.number, qp.remote_qpn, psn, length=header.length
            )
            self._send(qp.remote_gid, response, memory)
            return

        def written() -> None:
            if qp.state in (QpState.RTR, QpState.RTS):
                qp.expected += 1
                self._answer(qp, Kind.ACK, psn)

        def wanted() -> bool:
            return qp.state is not QpState.ERR and self.regions.get(header.rkey) is region

        self._expect_payload(link, length, memory, written, wanted)

    def _receive_send(self, link: _Link, qp: Qp, header: Header) -> None:
        psn = header.psn
        if not qp.receives:
            self.counters.rnr_naks_sent += 1
            self._expect_payload(link, header.length, None)
            self._answer(qp, Kind.NAK, psn, Nak.RECEIVER_NOT_READY, qp.timeouts.min_rnr_timer)
            return
        receive = qp.receives.popleft()
        memory = self._local(receive.lkey, receive.address, receive.length, write=True)
        if memory is None or header.length > receive.length:
            status = WcStatus.LOC_PROT_ERR if memory is None else WcStatus.LOC_LEN_ERR
            self._complete(qp, receive.wr_id, status, WcOpcode.RECV, 0)
            self._expect_payload(link, header.length, None)
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

        self._expect_payload(link, header.length, memory[: header.length], received, wanted)

    def _response(self, link: _Link, qp: Qp, header: Header) -> None:
        request = qp.in_flight[0]
        self._progress(qp)
        if header.kind is Kind.READ_RESPONSE:
            memory = None
            if request.opcode is WrOpcode.RDMA_READ and header.length == request.length:
                memory = self._local(request.lkey, request.address, request.length, write=True)
            if memory is None:
                self._expect_payload(link, header.length, None)
                self._fail(qp, WcStatus.LOC_PROT_ERR)
                return

            def wanted() -> bool:
                if qp.state is not QpState.RTS or not qp.in_flight:
                    return False
                self._progress(qp)
                return qp.in_flight[0] is request and request.lkey in self._by_lkey

            self._expect_payload(
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
        self._complete(qp, request.wr_id, WcStatus.SUCCESS, _opcode(request), request.length)

    # ---- the requester --------------------------------------------------------------------

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
            self._send(qp.remote_gid, header, None if write else memory)
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
            link = self._links.get(qp.remote_gid)
            if (
                link is not None
                and link.outgoing
                and now - link.last_progress < ack_timeout(qp.timeouts)
            ):
                qp.deadline = now + ack_timeout(qp.timeouts)
            elif qp.retries_left == 0:
                self._fail(qp, WcStatus.RETRY_EXC_ERR)
            else:
                qp.retries_left -= 1
                self.counters.retransmissions += 1
                self._rewind(qp, 0.0)
                self._transmit(qp)

    # ---- completions and errors -----------------------------------------------------------

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
            self._complete(qp, each.wr_id, WcStatus.WR_FLUSH_ERR, _opcode(each), 0)
            qp.in_flight.remove(each)
        qp.in_flight.remove(failed)
        self._complete(qp, failed.wr_id, status, _opcode(failed), 0)
        self._error(qp)

    def _error(self, qp: Qp) -> None:
        if qp.state is QpState.ERR:
            return
        qp.state = QpState.ERR
        qp.deadline = None
        self._flush(qp)

    def _flush(self, qp: Qp) -> None:
        for request in [*qp.in_flight, *qp.send_queue]:
            self._complete(qp, request.wr_id, WcStatus.WR_FLUSH_ERR, _opcode(request), 0)
        qp.in_flight.clear()
        qp.send_queue.clear()
        for receive in qp.receives:
            self._complete(qp, receive.wr_id, WcStatus.WR_FLUSH_ERR, WcOpcode.RECV, 0)
        qp.receives.clear()


def _opcode(request: SendRequest) -> WcOpcode:
    return {
        WrOpcode.SEND: WcOpcode.SEND,
        WrOpcode.RDMA_WRITE: WcOpcode.RDMA_WRITE,
        WrOpcode.RDMA_READ: WcOpcode.RDMA_READ,
    }[request.opcode]
