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
its address is asked of the descriptor when ``ACCEPTED`` is read, and if
libzmq has closed it already (a refusal can take microseconds), of the
kernel's table of connections to the socket's port that are closing; a peer
that hangs up itself that fast may leave no trace, and is logged as unknown.
"""

from __future__ import annotations

import errno
import os
import socket
from collections import OrderedDict

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


_CLOSING = {"04", "05", "06", "07", "08", "09", "0B"}
"""States of a TCP connection that is ending (FIN_WAIT1 ... CLOSING), as /proc/net/tcp has them."""


def _peer(fd: int, port: int) -> str | None:
    """The host at the other end of descriptor ``fd``, which may be closed already."""
    try:
        with socket.socket(fileno=os.dup(fd)) as peer:
            return str(peer.getpeername()[0])
    except (OSError, IndexError, TypeError):
        hosts = _closing_peers(port)
        return hosts.pop() if len(hosts) == 1 else None


def _closing_peers(port: int) -> set[str]:
    """Hosts whose connections to local ``port`` are ending (from /proc/net/tcp and tcp6)."""
    hosts: set[str] = set()
    for table, family in (("/proc/net/tcp", socket.AF_INET), ("/proc/net/tcp6", socket.AF_INET6)):
        try:
            with open(table) as rows:
                next(rows, None)
                for row in rows:
                    fields = row.split()
                    local, remote, state = fields[1], fields[2], fields[3]
                    if state in _CLOSING and int(local.rsplit(":", 1)[1], 16) == port:
                        hosts.add(_host(remote.rsplit(":", 1)[0], family))
        except (OSError, ValueError, IndexError):
            continue
    return hosts


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
        self._port = int(sock.last_endpoint.decode().rsplit(":", 1)[1])
        self._io = io
        self._refusals = refusals
        self._where = where
        self._pending: OrderedDict[int, str | None] = OrderedDict()
        """Descriptors of connections still in their handshake, with the peer's host."""
        self._failure: str | None = None
        """Why the handshake whose ``DISCONNECTED`` comes next failed."""
        io.call_soon(io.add_reader, self._monitor, self._readable)

    def _readable(self) -> None:
        while True:
            try:
                event = recv_monitor_message(self._monitor, zmq.NOBLOCK)
            except zmq.Again:
                return
            self.observe(int(event["event"]), int(event["value"]))

    def observe(self, event: int, value: int) -> None:
        """One monitor event: ``value`` is a descriptor, an error code or a ZAP status."""
        if event == zmq.EVENT_ACCEPTED:
            self._pending[value] = _peer(value, self._port)
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
