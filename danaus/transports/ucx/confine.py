"""Keeps a listening TCP socket of this process to one address, as if it were bound to it.

ucxx 0.52's Python API makes its listener bind the wildcard address (every
interface): the ``host`` of UCX's listener builder exists in ucxx's C++ library
but not in its Python binding. So once the listener listens, a classic BPF
socket filter is attached to its socket (``SO_ATTACH_FILTER``, which needs no
privilege): the kernel then drops every packet whose IPv4 destination is not
the job's address before the socket sees it. A connection to any other address
of the host never completes its handshake; unlike an unbound port, which the
kernel answers with a reset, it goes unanswered until the peer gives up. The
connections the socket accepts inherit the filter, and their packets, sent to
that same address, pass it.
"""

from __future__ import annotations

import ctypes
import ipaddress
import os
import socket
import struct

import psutil

SO_ATTACH_FILTER = 26
"""From <asm-generic/socket.h> (Python's socket module does not name it)."""
_NETWORK_HEADER = -0x100000
"""``SKF_NET_OFF``: loads at this offset and after read the IP header."""
_IPV4_DESTINATION = 16
"""Offset of the destination address in an IPv4 header."""

_LOAD_WORD, _JUMP_IF_EQUAL, _RETURN = 0x20, 0x15, 0x06
"""``BPF_LD|BPF_W|BPF_ABS``, ``BPF_JMP|BPF_JEQ|BPF_K``, ``BPF_RET|BPF_K``."""
_KEEP, _DROP = 0xFFFFFFFF, 0


class ConfinementError(OSError):
    """A listener could not be kept to the job's address (the reason is the message)."""


def ipv4_of(host: str) -> str | None:
    """The IPv4 address ``host`` names; None for the wildcard (every interface).

    Raises `ConfinementError` for a host with no IPv4 address.
    """
    try:
        address = socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_STREAM)[0][4][0]
    except (socket.gaierror, UnicodeError) as exc:
        raise ConfinementError(f"{host!r} has no IPv4 address: {exc}") from None
    return None if ipaddress.ip_address(address).is_unspecified else str(address)


def program(address: str) -> bytes:
    """The filter's instructions (``struct sock_filter``): keep packets to ``address`` only."""
    instructions = [
        (_LOAD_WORD, 0, 0, (_NETWORK_HEADER + _IPV4_DESTINATION) & 0xFFFFFFFF),
        (_JUMP_IF_EQUAL, 0, 1, int(ipaddress.IPv4Address(address))),
        (_RETURN, 0, 0, _KEEP),
        (_RETURN, 0, 0, _DROP),
    ]
    return b"".join(struct.pack("HBBI", *instruction) for instruction in instructions)


def listening_fd(port: int) -> int:
    """The descriptor of this process's socket listening on every IPv4 interface at ``port``."""
    for connection in psutil.Process().net_connections("tcp4"):
        if (
            connection.status == psutil.CONN_LISTEN
            and connection.laddr.port == port
            and connection.fd >= 0
        ):
            if connection.laddr.ip != "0.0.0.0":
                raise ConfinementError(f"port {port} listens on {connection.laddr.ip}")
            return connection.fd
    raise ConfinementError(f"no socket of this process listens on IPv4 port {port}")


def confine(port: int, address: str) -> None:
    """Have this process's listener on ``port`` take connections to ``address`` only."""
    instructions = program(address)
    code = ctypes.create_string_buffer(instructions, len(instructions))
    fprog = struct.pack("HL", len(instructions) // 8, ctypes.addressof(code))
    fd = listening_fd(port)
    try:
        with socket.socket(fileno=os.dup(fd)) as listener:  # the same socket, closed alone
            listener.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, fprog)
    except OSError as exc:
        raise ConfinementError(f"the filter of port {port} could not be attached: {exc}") from None
