"""Which user holds the other end of a TCP connection made on this host (Linux).

The kernel knows each socket's owner. ``/proc/net/tcp`` lists them all, but
the kernel writes the whole table for each read: tens of milliseconds on a
host with a thousand sockets, for every request. Its socket-diagnostics
interface (``NETLINK_SOCK_DIAG``, what ``ss`` uses) answers one exact
question instead: the socket with this source and destination, and its uid,
in well under a millisecond. psutil offers neither: its connection table has
no owner column and reads ``/proc/net/tcp`` the slow way.
"""

from __future__ import annotations

import ipaddress
import itertools
import socket
import struct

NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLM_F_REQUEST = 1
NLMSG_ERROR = 2
NO_COOKIE = 0xFFFFFFFF
"""An exact lookup names the socket by its addresses, not by a cookie from an earlier dump."""
ALL_STATES = 0xFFFFFFFF
HEADER = struct.Struct("=IHHII")
"""``struct nlmsghdr``: length, type, flags, sequence, port id."""
REQUEST = struct.Struct("=BBBBI")
"""``struct inet_diag_req_v2`` up to its socket id: family, protocol, extensions, pad, states."""
SOCKET_ID = struct.Struct("!HH16s16s")
"""``struct inet_diag_sockid`` up to its interface: ports and addresses, in network order;
then come the interface and the cookie (12 bytes)."""
UID_OFFSET = HEADER.size + 4 + SOCKET_ID.size + 12 + 12
"""Where an answer holds the socket's uid: after the header, ``struct inet_diag_msg``'s four
bytes of family and state, its socket id, and its expiry and queue lengths."""

_sequence = itertools.count(1)


def available() -> bool:
    """Whether this kernel answers socket-diagnostics questions."""
    try:
        socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_SOCK_DIAG).close()
    except (AttributeError, OSError):
        return False
    return True


def plain(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """``host``'s address, IPv4 for an IPv4-mapped IPv6 one (``::ffff:127.0.0.1``)."""
    ip = ipaddress.ip_address(host)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def peer_uid(peer: tuple[str, int], local: tuple[str, int]) -> int | None:
    """The uid of the socket at ``peer`` connected to ``local``, both on this host; None if the
    kernel knows no such socket (it closed meanwhile, or lives in another network namespace)."""
    source, destination = plain(peer[0]), plain(local[0])
    family = socket.AF_INET if source.version == 4 else socket.AF_INET6
    sockid = SOCKET_ID.pack(peer[1], local[1], source.packed, destination.packed)
    body = REQUEST.pack(family, socket.IPPROTO_TCP, 0, 0, ALL_STATES)
    body += sockid + struct.pack("=III", 0, NO_COOKIE, NO_COOKIE)
    message = HEADER.pack(
        HEADER.size + len(body), SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST, next(_sequence), 0
    )
    with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_SOCK_DIAG) as diag:
        diag.sendto(message + body, (0, 0))
        answer = diag.recv(8192)
    _, kind, _, _, _ = HEADER.unpack_from(answer)
    if kind == NLMSG_ERROR or len(answer) < UID_OFFSET + 4:
        return None
    return struct.unpack_from("=I", answer, UID_OFFSET)[0]
