"""Every refused ZeroMQ handshake, logged (rate-limited) with the peer's address.

The ZAP handler hears only of peers that got as far as presenting the job's
credentials; one with no key, another key or garbage is refused by libzmq
before that. A socket monitor hears of them all, as a sequence per connection:
``ACCEPTED`` (with the connection's file descriptor), then, for a refusal, a
``HANDSHAKE_FAILED_*`` event followed at once by ``DISCONNECTED`` (with the
descriptor again). A handshake that breaks ZeroMQ's framing (garbage, a frame
over ``frame_bytes``) ends with ``DISCONNECTED`` alone, so a connection that
disconnects before its handshake succeeded is a refusal too.

libzmq (4.3) names no descriptor in ``HANDSHAKE_SUCCEEDED``; a success is
credited to the oldest connection still in its handshake, which is exact
unless a stranger's handshake overlaps a member's. Nor does it name the peer:
its address is asked of the descriptor when ``ACCEPTED`` is read (`Peers`).
If libzmq has closed it already (a refusal can take microseconds), the
kernel still lists the connection, ending, among those to the socket's port:
the one listed there that no earlier connection accounts for is this one, so
its address is kept even after a flood from elsewhere. Where several hosts
could be the peer, all are named; only a peer that hung up first that fast
leaves no trace, and is logged as unknown.
The kernel's table is read from ``/proc/net/tcp`` itself rather than through
psutil's ``net_connections``, which also maps every socket of every process on
the host to its pid: measured here, 29 ms a call against 18 ms with 114
processes, and growing with every descriptor on the host, on the I/O thread,
for each stranger that hangs up fast (which a hostile peer can do at will).
"""

from __future__ import annotations

import errno
import os
import socket
from collections import OrderedDict
from collections.abc import Callable

import zmq
from zmq.utils.monitor import recv_monitor_message

from danaus.transports.tcp.ioloop import IoLoop
from danaus.transports.tcp.refusals import RefusalLog

_FAILED = {
    zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL,
    zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL,
    zmq.EVENT_HANDSHAKE_FAILED_AUTH,
}
_EVENTS = zmq.EVENT_ACCEPTED | zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_DISCONNECTED
for _event in _FAILED:
    _EVENTS |= _event

_PROTOCOL_REASONS = {
    zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH: "it offered no key or another mechanism",
    zmq.PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC: "its key is not the job's",
}


def _reason(event: int, value: int) -> str:
    if event == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
        return f"not a member of this job (ZAP {value})"
    if event == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL:
        return _PROTOCOL_REASONS.get(value, f"it broke the handshake (protocol error {value:#x})")
    if value == errno.EAGAIN:
        return "no handshake within the handshake timeout"
    return f"it left during the handshake ({errno.errorcode.get(value, value)})"


_CLOSING = {"04", "05", "06", "07", "09", "0B"}
"""States of a TCP connection whose descriptor is closed (FIN_WAIT1, FIN_WAIT2, TIME_WAIT,
CLOSE, LAST_ACK, CLOSING), as /proc/net/tcp has them. Not CLOSE_WAIT: the peer has hung up,
but the descriptor is open, and names its peer itself."""


ACCOUNTED = 8192
"""Peers' (address, port) kept as accounted for: more than a minute of a flood's refusals,
as long as the kernel lists an ended connection (TIME_WAIT)."""

Endpoint = tuple[str, int]
ClosingTable = Callable[[int], set[Endpoint]]


class Peers:
    """The host at the other end of each connection a socket accepted (the I/O thread)."""

    def __init__(self, port: int, closing: ClosingTable | None = None) -> None:
        self._port = port
        self._closing = closing or _closing_connections
        self._accounted: OrderedDict[Endpoint, None] = OrderedDict()
        """Peers' (address, port) already named, by their descriptor or by the table."""
        self._table: set[Endpoint] | None = None
        """The kernel's ending connections, read at most once per batch of events."""

    def new_batch(self) -> None:
        """Events read together may share one reading of the kernel's table."""
        self._table = None

    def of(self, fd: int) -> str | None:
        """The host at the other end of accepted descriptor ``fd``, which may be closed."""
        try:
            with socket.socket(fileno=os.dup(fd)) as peer:
                host, port = peer.getpeername()[:2]
                if peer.getsockname()[1] != self._port:
                    raise ValueError("the number names another socket now")
        except (OSError, ValueError, TypeError):
            return self._of_closed()
        self._account((str(host), int(port)))
        return str(host)

    def _of_closed(self) -> str | None:
        if self._table is None:
            self._table = self._closing(self._port)
        fresh = sorted(self._table.difference(self._accounted))
        # None fresh: on loopback a new connection may take over the address and port of
        # one accounted for that the kernel still lists (tcp_tw_reuse).
        hosts = sorted({host for host, _ in fresh or self._table})
        if len(hosts) != 1:
            return f"one of {', '.join(hosts)}" if hosts else None
        if fresh:
            self._account(fresh[0])
        return hosts[0]

    def _account(self, peer: Endpoint) -> None:
        self._accounted[peer] = None
        while len(self._accounted) > ACCOUNTED:
            self._accounted.popitem(last=False)


def _closing_connections(port: int) -> set[Endpoint]:
    """Peers of connections to local ``port`` whose descriptor is closed (/proc/net/tcp, tcp6)."""
    found: set[Endpoint] = set()
    for table, family in (("/proc/net/tcp", socket.AF_INET), ("/proc/net/tcp6", socket.AF_INET6)):
        try:
            with open(table) as rows:
                next(rows, None)
                for row in rows:
                    fields = row.split()
                    local, remote, state = fields[1], fields[2], fields[3]
                    if state in _CLOSING and int(local.rsplit(":", 1)[1], 16) == port:
                        host, remote_port = remote.rsplit(":", 1)
                        found.add((_host(host, family), int(remote_port, 16)))
        except (OSError, ValueError, IndexError):
            continue
    return found


def _host(hex_address: str, family: int) -> str:
    """An address as /proc/net/tcp writes it (32-bit words in host order) as text."""
    raw = bytes.fromhex(hex_address)
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    address = socket.inet_ntop(family, words)
    return address.removeprefix("::ffff:")


class HandshakeMonitor:
    """Watches one bound zmq socket's handshakes and logs the refused ones (I/O thread)."""

    def __init__(self, sock: zmq.Socket, io: IoLoop, refusals: RefusalLog, where: str) -> None:
        self._monitor = sock.get_monitor_socket(_EVENTS)
        self._peers = Peers(int(sock.last_endpoint.decode().rsplit(":", 1)[1]))
        self._io = io
        self._refusals = refusals
        self._where = where
        self._pending: OrderedDict[int, str | None] = OrderedDict()
        """Descriptors of connections still in their handshake, with the peer's host."""
        self._failure: str | None = None
        """Why the handshake whose ``DISCONNECTED`` comes next failed."""
        io.call_soon(io.add_reader, self._monitor, self._readable)

    def _readable(self) -> None:
        self._peers.new_batch()
        while True:
            try:
                event = recv_monitor_message(self._monitor, zmq.NOBLOCK)
            except zmq.Again:
                return
            self.observe(int(event["event"]), int(event["value"]))

    def observe(self, event: int, value: int) -> None:
        """One monitor event: ``value`` is a descriptor, an error code or a ZAP status."""
        if event == zmq.EVENT_ACCEPTED:
            self._pending[value] = self._peers.of(value)
        elif event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
            if self._pending:
                self._pending.popitem(last=False)
        elif event in _FAILED:
            self._failure = _reason(event, value)
        elif event == zmq.EVENT_DISCONNECTED:
            failure, self._failure = self._failure, None
            if value in self._pending:
                peer = self._pending.pop(value)
                why = failure or "its handshake broke ZeroMQ's framing or was too large"
                self._refusals.refused(self._where, peer, why)
            elif failure is not None:
                self._refusals.refused(self._where, None, failure)

    def close(self) -> None:
        """Stop watching (I/O thread)."""
        self._io.remove_reader(self._monitor)
        self._monitor.close(0)
