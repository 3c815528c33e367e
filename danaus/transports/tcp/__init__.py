"""The ``tcp`` transport: real processes talking over authenticated ZeroMQ sockets."""

from __future__ import annotations

import ipaddress
from typing import Any

from danaus.transports.tcp.limits import Limits
from danaus.transports.tcp.world import (
    ADMIN_HOST,
    BIND_HOST,
    HEARTBEAT_INTERVAL,
    HEARTBEAT_TIMEOUT,
    TcpWorld,
)

__all__ = ["TcpWorld", "World", "configured", "create_world"]

World = TcpWorld
"""The world class of this transport (workers make theirs with ``World.worker``)."""


def configured(
    heartbeat_interval: float = HEARTBEAT_INTERVAL,
    heartbeat_timeout: float = HEARTBEAT_TIMEOUT,
    bind_host: str = BIND_HOST,
    trace: bool | str | None = None,
    encrypt: bool = True,
    admin: bool = True,
    admin_host: str = ADMIN_HOST,
    max_message_bytes: int | None = None,
    frame_bytes: int | None = None,
    handshake_timeout: float | None = None,
    max_pending_handshakes: int | None = None,
    max_procs_per_host: int | None = None,
) -> None:
    """Check the options of ``configure(transport="tcp", ...)``.

    The limits (``max_message_bytes`` and the rest) are described in
    `danaus.transports.tcp.limits`; None takes them from the environment.
    ``trace`` (True, or a file to write at shutdown; None: ``DANAUS_TRACE``)
    is described in `danaus.tracing`, ``admin`` and ``admin_host`` in
    `danaus.transports.tcp.admin`.
    """
    if heartbeat_interval <= 0 or heartbeat_timeout <= heartbeat_interval:
        raise ValueError("need 0 < heartbeat_interval < heartbeat_timeout")
    if not encrypt and not _loopback(bind_host):
        raise ValueError(
            f"encrypt=False is refused with bind_host={bind_host!r}: whoever can read the "
            "traffic could read the job's password and run code in every process of the job; "
            "it is allowed only on loopback (bind_host='127.0.0.1')"
        )
    Limits.from_options(
        max_message_bytes=max_message_bytes,
        frame_bytes=frame_bytes,
        handshake_timeout=handshake_timeout,
        max_pending_handshakes=max_pending_handshakes,
        max_procs_per_host=max_procs_per_host,
    )


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def create_world(**options: Any) -> TcpWorld:
    """The controller's world (``configured`` has checked the options)."""
    return TcpWorld.controller(**options)
