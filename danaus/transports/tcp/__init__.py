"""The ``tcp`` transport: real processes talking over authenticated ZeroMQ sockets."""

from __future__ import annotations

from typing import Any

from danaus.transports.tcp.world import BIND_HOST, HEARTBEAT_INTERVAL, HEARTBEAT_TIMEOUT, TcpWorld

__all__ = ["TcpWorld", "World", "configured", "create_world"]

World = TcpWorld
"""The world class of this transport (workers make theirs with ``World.worker``)."""


def configured(
    heartbeat_interval: float = HEARTBEAT_INTERVAL,
    heartbeat_timeout: float = HEARTBEAT_TIMEOUT,
    bind_host: str = BIND_HOST,
    trace: bool = False,
    encrypt: bool = True,
) -> None:
    """Check the options of ``configure(transport="tcp", ...)``."""
    if heartbeat_interval <= 0 or heartbeat_timeout <= heartbeat_interval:
        raise ValueError("need 0 < heartbeat_interval < heartbeat_timeout")


def create_world(**options: Any) -> TcpWorld:
    """The controller's world (``configured`` has checked the options)."""
    return TcpWorld.controller(**options)
