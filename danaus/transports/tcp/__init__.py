"""The ``tcp`` transport: real processes talking over authenticated ZeroMQ sockets.

Importing the package is light: the world's code (`danaus.transports.tcp.world`,
ZeroMQ, asyncio, the data plane) is imported by `prepare`, after it has started
the fork server, so that the server's imports and the controller's run at once.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from danaus.core.settings import JobOptions, Settings

if TYPE_CHECKING:
    from danaus.transports.tcp.world import TcpWorld

__all__ = ["OPTIONS", "TcpWorld", "World", "configured", "create_world", "prepare"]

WORLD_MODULE = "danaus.transports.tcp.world"

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


def __getattr__(name: str) -> object:
    """``World`` (the world class of this transport; workers make theirs with
    ``World.worker``) and ``TcpWorld``, imported on first use."""
    if name in ("World", "TcpWorld"):
        return importlib.import_module(WORLD_MODULE).TcpWorld
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def configured(settings: Settings) -> None:
    """Check what ``settings`` ask of the tcp transport, before anything starts.

    Workers on other hosts need a job key and an address of this controller
    that they can reach; a job in clear (``encrypt=False``) stays on loopback.
    """
    if settings.workers:
        from danaus.transports.tcp import jobkey
        from danaus.transports.tcp.world import attach_plan

        jobkey.resolve(None, settings)
        attach_plan(settings.workers, settings.bind_host)
    if not settings.encrypt:
        from danaus.transports.tcp.world import is_loopback

        if not is_loopback(settings.bind_host):
            raise ValueError(
                f"encrypt=False is refused with bind_host={settings.bind_host!r}: whoever can "
                "read the traffic could read the job's password and run code in every process "
                "of the job; it is allowed only on loopback (bind_host='127.0.0.1')"
            )


def prepare(settings: Settings) -> None:
    """Get ready to make a world from ``settings`` (`configured` has checked them).

    A controller whose procs run on this host starts its fork server first
    (`danaus.transports.tcp.forkserver`), then imports the world's code: the
    server's imports (what every worker imports, about 0.2 s of CPU) then run
    while this process imports its own, instead of after them.
    """
    if not settings.workers:
        from danaus.transports.tcp.forkserver import POOL

        POOL.ahead("tcp", settings.job_options().preload)
    importlib.import_module(WORLD_MODULE)


def create_world(settings: Settings) -> TcpWorld:
    """The controller's world (``configured`` has checked the settings)."""
    from danaus.transports.tcp.world import TcpWorld

    return TcpWorld.controller(settings)
