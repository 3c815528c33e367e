"""UCX's own listening sockets stay on the job's interface.

Besides the listener Danaus asks for, UCX's TCP transport listens on every
network device it may use (``UCX_NET_DEVICES``, all by default). Unless the
user set that variable, it is set to the device that holds the job's bind
address before UCX starts (``lo`` for a local job), so UCX listens there only.
Workers inherit it with the rest of the controller's environment; a host
agent on another host sets its own, for its address.
"""

from __future__ import annotations

import fcntl
import ipaddress
import os
import socket
import struct

SIOCGIFADDR = 0x8915


def device_of(host: str) -> str | None:
    """The network device holding IPv4 address ``host`` (None: a wildcard, or none holds it)."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return None
    if address.is_unspecified:
        return None
    if address.is_loopback:
        return "lo"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        for _, name in socket.if_nameindex():
            try:
                request = struct.pack("256s", name.encode()[:15])
                answer = fcntl.ioctl(probe.fileno(), SIOCGIFADDR, request)
            except OSError:
                continue
            if socket.inet_ntoa(answer[20:24]) == str(address):
                return name
    return None


_USERS = os.environ.get("UCX_NET_DEVICES")
"""The user's own setting, which is never changed."""


def restrict_to(host: str) -> None:
    """Have UCX listen only on the device of ``host``, unless the user set ``UCX_NET_DEVICES``.

    A process may run one job after another (on loopback, then attached to
    other hosts): each sets the device of its own address.
    """
    if _USERS is not None:
        return
    device = device_of(host)
    if device is None:
        os.environ.pop("UCX_NET_DEVICES", None)
    else:
        os.environ["UCX_NET_DEVICES"] = device
