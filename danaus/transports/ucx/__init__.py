"""The ``ucx`` transport: real processes whose data travels over UCX (``pip install danaus[ucx]``).

UCX settings come from the environment (``UCX_TLS`` and friends); unset, they
default to ``UCX_TLS=tcp,sm,self`` and ucxx's thread progress with Python
futures (see `danaus.transports.ucx.plane`), which work on any Linux host.
Workers inherit the controller's environment.
"""

from __future__ import annotations

import atexit
import importlib.util
import os

os.environ.setdefault("UCX_TLS", "tcp,sm,self")
os.environ.setdefault("UCXPY_PROGRESS_MODE", "thread")
os.environ.setdefault("UCXPY_ENABLE_PYTHON_FUTURE", "1")
os.environ.setdefault("UCX_WARN_UNUSED_ENV_VARS", "n")

if importlib.util.find_spec("ucxx") is None:
    raise ImportError(
        "the ucx transport needs the ucxx package; install it with: pip install 'danaus[ucx]'"
    )

from danaus.core import config
from danaus.core.settings import Settings
from danaus.transports import tcp
from danaus.transports.tcp import configured
from danaus.transports.tcp.world import TcpWorld
from danaus.transports.ucx.transport import UcxTransport

__all__ = ["OPTIONS", "UcxWorld", "World", "configured", "create_world"]


class UcxWorld(TcpWorld):
    """A process's world on the ucx transport: tcp's control plane, UCX's data plane."""

    name = "ucx"
    transport_class = UcxTransport


World = UcxWorld
"""The world class of this transport (workers make theirs with ``World.worker``)."""

OPTIONS = tcp.OPTIONS | {"ucx_bulk", "ucx_rma", "cache_dir"}
"""The settings this transport takes: tcp's, and those of UCX in each process."""


def create_world(settings: Settings) -> UcxWorld:
    """The controller's world; at exit it shuts down while UCX still works.

    Exit handlers run last registered first: registering the shutdown again
    here runs it before those registered while UCX was set up (ucxx's finalizers).
    """
    world = UcxWorld.controller(settings)
    atexit.register(config.shutdown)
    return world
