"""Where a UCX connection comes from and where it arrived, asked of UCX itself.

ucxx does not say, so this asks ``ucp_ep_query`` through ctypes, from the UCX
library ucxx has loaded. Anything that goes wrong gives None: an address only
names a peer in the log and picks the interface a connection arrived on.
"""

from __future__ import annotations

import ctypes
import os
import socket
import struct
from typing import Any

_LOCAL_SOCKADDR = 1 << 1
_REMOTE_SOCKADDR = 1 << 2
_NAME_BYTES = 32
_SOCKADDR_BYTES = 128
_LOCAL_AT = 8 + _NAME_BYTES
_REMOTE_AT = _LOCAL_AT + _SOCKADDR_BYTES
_ATTR_BYTES = 1024
"""Room for ``ucp_ep_attr_t`` (field mask, name, two sockaddr_storage, and more)."""


def _ucp() -> Any:
    try:
        lib = ctypes.CDLL("libucp.so.0", mode=os.RTLD_NOLOAD)
        lib.ucp_ep_query.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        lib.ucp_ep_query.restype = ctypes.c_int
        return lib
    except (OSError, AttributeError):
        return None


def _address(raw: bytes, at: int) -> tuple[str, int] | None:
    (family,) = struct.unpack_from("H", raw, at)
    (port,) = struct.unpack_from(">H", raw, at + 2)
    if family == socket.AF_INET:
        return socket.inet_ntop(socket.AF_INET, raw[at + 4 : at + 8]), port
    if family == socket.AF_INET6:
        return socket.inet_ntop(socket.AF_INET6, raw[at + 8 : at + 24]), port
    return None


def endpoint_addresses(handle: int) -> tuple[tuple[str, int] | None, tuple[str, int] | None]:
    """(local, remote) ``(host, port)`` of the UCP endpoint ``handle`` (None each if unknown)."""
    lib = _ucp()
    if lib is None:
        return None, None
    attr = ctypes.create_string_buffer(_ATTR_BYTES)
    struct.pack_into("Q", attr, 0, _LOCAL_SOCKADDR | _REMOTE_SOCKADDR)
    try:
        if lib.ucp_ep_query(ctypes.c_void_p(handle), attr) != 0:
            return None, None
    except Exception:
        return None, None
    raw = attr.raw
    return _address(raw, _LOCAL_AT), _address(raw, _REMOTE_AT)
