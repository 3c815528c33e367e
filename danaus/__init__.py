"""Danaus: single-controller distributed programs on meshes of actors.

Everything users need is importable from here (and from ``danaus.sim``,
``danaus.rdma``, ``danaus.chaos``, ``danaus.spmd``, ``danaus.tensor`` and
``danaus.random``); the modules under ``danaus.core`` are the implementation. The
tensor engine's names (``danaus.inspect``, ``danaus.Tensor``...) load torch on first
use, not here. Importing this package makes no world and configures nothing, with one
exception: under ``DANAUS_TRANSPORT=sim`` it routes ``asyncio.run`` to the simulator.
asyncio offers no later hook, and a test runner (pytest-asyncio, say) makes its event loop
before a test's first use of Danaus: without it, such a suite could not run on the simulator
unchanged.
"""

import importlib as _importlib

from danaus.core import config as _config
from danaus.core.actor import Actor, concurrent_endpoint, endpoint
from danaus.core.actor_logs import settings as config
from danaus.core.actor_mesh import ActorMesh
from danaus.core.attach import attach_to_workers
from danaus.core.bootstrap import BootstrapCommand
from danaus.core.config import configure, shutdown
from danaus.core.context import Context, context, current_actor_name, current_rank, current_size
from danaus.core.controllers import get_or_spawn_controller
from danaus.core.endpoint import Accumulator, Endpoint, as_endpoint, send
from danaus.core.errors import (
    ActorError,
    MeshStoppedError,
    MessageTooLargeError,
    RemoteException,
    SerializationError,
    SupervisionError,
)
from danaus.core.future import Future
from danaus.core.instance import Instance
from danaus.core.mesh import HostMesh, ProcMesh, hosts, this_host, this_proc
from danaus.core.ports import Channel, Port, PortReceiver
from danaus.core.shape import Extent, Point, Shape
from danaus.core.stopped import LostMember, Stopped
from danaus.core.supervision import MeshFailure, RestartPolicy
from danaus.core.supervision import default_unhandled_fault_hook as _default_fault_hook
from danaus.core.undeliverable import UndeliverableMessageEnvelope
from danaus.core.value_mesh import ValueMesh

__version__ = "0.1.0"
"""The version of Danaus (also ``danaus --version``; the package metadata reads it from here)."""

__all__ = [
    "Accumulator",
    "Actor",
    "ActorError",
    "ActorMesh",
    "BootstrapCommand",
    "Channel",
    "Context",
    "Endpoint",
    "Extent",
    "Future",
    "HostMesh",
    "Instance",
    "LostMember",
    "MeshFailure",
    "MeshStoppedError",
    "MessageTooLargeError",
    "Point",
    "Port",
    "PortReceiver",
    "ProcMesh",
    "RemoteException",
    "RestartPolicy",
    "SerializationError",
    "Shape",
    "Stopped",
    "SupervisionError",
    "UndeliverableMessageEnvelope",
    "ValueMesh",
    "as_endpoint",
    "attach_to_workers",
    "concurrent_endpoint",
    "config",
    "configure",
    "context",
    "current_actor_name",
    "current_rank",
    "current_size",
    "default_bootstrap_cmd",
    "endpoint",
    "get_or_spawn_controller",
    "hosts",
    "make_job_key",
    "run_worker_loop_forever",
    "send",
    "shutdown",
    "this_host",
    "this_proc",
    "unhandled_fault_hook",
]

_FROM_WORKERS = ("run_worker_loop_forever", "default_bootstrap_cmd", "make_job_key")
"""Names of `danaus.workers`, imported on first use (it imports the tcp transport)."""
_FROM_TENSOR = (
    "RemoteProcessGroup",
    "RemoteTensorError",
    "Simulator",
    "Stream",
    "Tensor",
    "call_on_shard_and_fetch",
    "fetch_shard",
    "get_active_mesh",
    "get_active_stream",
    "grad_generator",
    "inspect",
    "no_mesh",
    "reduce",
    "reduce_",
    "remote",
    "show",
    "slice_mesh",
    "to_mesh",
)
"""Names of `danaus.tensor`, the tensor engine, imported on first use (it imports torch)."""
_SUBMODULES = ("sim", "rdma", "chaos", "spmd", "tensor", "random")

unhandled_fault_hook = _default_fault_hook
"""Called in the controller for each failure that reaches it unhandled.

Replace it by assignment (``danaus.unhandled_fault_hook = my_hook``): it is
looked up here each time a failure needs it. The default prints a report and
ends the controller with status 1.
"""


def __getattr__(name: str) -> object:
    """The submodules, the workers' names and the tensor engine's, imported on first use."""
    if name in _SUBMODULES:
        return _importlib.import_module(f"danaus.{name}")
    if name in _FROM_WORKERS:
        return getattr(_importlib.import_module("danaus.workers"), name)
    if name in _FROM_TENSOR:
        return getattr(_importlib.import_module("danaus.tensor"), name)
    raise AttributeError(f"module 'danaus' has no attribute {name!r}")


if _config.selected() == "sim":
    from danaus.transports.sim import route_asyncio_run as _route_asyncio_run

    _route_asyncio_run()
