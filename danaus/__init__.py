"""Danaus: single-controller distributed programs on meshes of actors.

Everything users need is importable from here (and from ``danaus.sim`` and
``danaus.rdma``); the modules under ``danaus.core`` are the implementation.
"""

import os as _os

from danaus.core.actor import Actor, endpoint
from danaus.core.config import configure, shutdown
from danaus.core.context import Context, context, current_rank, current_size
from danaus.core.endpoint import Accumulator, Endpoint, send
from danaus.core.errors import (
    ActorError,
    MeshStoppedError,
    RemoteException,
    SerializationError,
    SupervisionError,
)
from danaus.core.future import Future
from danaus.core.instance import Instance
from danaus.core.mesh import ActorMesh, HostMesh, ProcMesh, hosts, this_host, this_proc
from danaus.core.ports import Channel, Port, PortReceiver
from danaus.core.shape import Extent, Point, Shape
from danaus.core.supervision import MeshFailure, RestartPolicy
from danaus.core.supervision import default_unhandled_fault_hook as unhandled_fault_hook
from danaus.core.value_mesh import ValueMesh

__all__ = [
    "Accumulator",
    "Actor",
    "ActorError",
    "ActorMesh",
    "Channel",
    "Context",
    "Endpoint",
    "Extent",
    "Future",
    "HostMesh",
    "Instance",
    "MeshFailure",
    "MeshStoppedError",
    "Point",
    "Port",
    "PortReceiver",
    "ProcMesh",
    "RemoteException",
    "RestartPolicy",
    "SerializationError",
    "Shape",
    "SupervisionError",
    "ValueMesh",
    "configure",
    "context",
    "current_rank",
    "current_size",
    "endpoint",
    "hosts",
    "send",
    "shutdown",
    "this_host",
    "this_proc",
    "unhandled_fault_hook",
]

_SUBMODULES = ("sim", "rdma", "chaos", "tensor")


def __getattr__(name: str) -> object:
    if name in _SUBMODULES:
        import importlib

        return importlib.import_module(f"danaus.{name}")
    raise AttributeError(f"module 'danaus' has no attribute {name!r}")


if _os.environ.get("DANAUS_TRANSPORT") == "sim":
    configure("sim")
