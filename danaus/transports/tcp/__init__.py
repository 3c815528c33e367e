"""The ``tcp`` transport: real processes talking over authenticated ZeroMQ sockets."""

from __future__ import annotations

from danaus.core.settings import JobOptions, Settings
from danaus.transports.tcp import jobkey
from danaus.transports.tcp.world import TcpWorld, attach_plan, is_loopback

__all__ = ["OPTIONS", "TcpWorld", "World", "configured", "create_world"]

World = TcpWorld
"""The world class of this transport (workers make theirs with ``World.worker``)."""

OPTIONS = frozenset(JobOptions.__struct_fields__) | {
    "bind_host",
    "workers",
    "job_key",
    "job_key_file",
    "admin",
    "admin_host",
    "host_control",
    "jobs_dir",
}
"""The settings this transport takes besides those of every transport: the job's options
(every proc gets the controller's in its bootstrap) and those of a controller's run."""


def configured(settings: Settings) -> None:
    """Check what ``settings`` ask of the tcp transport, before anything starts.

    Workers on other hosts need a job key and an address of this controller
    that they can reach; a job in clear (``encrypt=False``) stays on loopback.
    """
    if settings.workers:
        jobkey.resolve(None, settings)
        attach_plan(settings.workers, settings.bind_host)
    if not settings.encrypt and not is_loopback(settings.bind_host):
        raise ValueError(
            f"encrypt=False is refused with bind_host={settings.bind_host!r}: whoever can read "
            "the traffic could read the job's password and run code in every process of the "
            "job; it is allowed only on loopback (bind_host='127.0.0.1')"
        )


def create_world(settings: Settings) -> TcpWorld:
    """The controller's world (``configured`` has checked the settings)."""
    return TcpWorld.controller(settings)
