"""Which mesh torch operations go to: ``mesh.activate()``, `no_mesh`, `get_active_mesh`.

Activating a mesh pushes a torch dispatch mode, so that operations with no
handle among their arguments (``torch.rand(3, 4)``, ``torch.zeros_like(x)`` on
a local tensor) are recorded for the mesh as well. The mode acts only for the
code that activated it: on the simulator, the procs' own work runs in the
same thread while the controller waits, and must stay local.
"""

from __future__ import annotations

import asyncio
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

import greenlet
from torch.utils._python_dispatch import TorchDispatchMode

if TYPE_CHECKING:
    from danaus.core.mesh import ProcMesh
    from danaus.tensor.engine import Engine


class Activation:
    """An active mesh, its engine, and the code (greenlet and task) that activated it."""

    __slots__ = ("engine", "mesh", "owner")

    def __init__(self, mesh: ProcMesh, engine: Engine, owner: tuple[Any, Any, Any]) -> None:
        self.mesh = mesh
        self.engine = engine
        self.owner = owner


_active: ContextVar[Activation | None] = ContextVar("danaus_tensor_mesh", default=None)


def current() -> Activation | None:
    """The activation in force for the running code, if any."""
    return _active.get()


def _running_code() -> tuple[Any, Any, Any]:
    """What tells apart the controller's code from the procs' on the simulator: the greenlet,
    the running loop (none in sync code) and the task."""
    loop = asyncio._get_running_loop()
    task = asyncio.current_task(loop) if loop is not None else None
    return greenlet.getcurrent(), loop, task


def owned(activation: Activation | None) -> Activation | None:
    """``activation`` if the running code is the code that made it, else None."""
    if activation is None or activation.owner != _running_code():
        return None
    return activation


class _MeshMode(TorchDispatchMode):
    """Sends every operation of the activating code to the active mesh."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        """No: torch would wrap `__torch_dispatch__` to keep its compiler out, which costs
        every operator a few microseconds; nothing compiles under this mode."""
        return False

    def __torch_dispatch__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
    ) -> Any:
        from danaus.tensor.dispatch import dispatch, stays_local

        activation = owned(_active.get())
        if activation is None or stays_local(func, args, kwargs):
            return func(*args, **(kwargs or {}))
        return dispatch(func, args, kwargs or {}, activation)


class Activated:
    """Returned by ``mesh.activate()``: the mesh is active from the call until the ``with``
    block ends (or `deactivate`)."""

    def __init__(self, mesh: ProcMesh | None) -> None:
        from danaus.tensor.engine import engine_of

        activation = None if mesh is None else Activation(mesh, engine_of(mesh), _running_code())
        self._token = _active.set(activation)
        self._mode: _MeshMode | None = None
        if activation is not None:
            self._mode = _MeshMode()
            self._mode.__enter__()

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        self.deactivate()

    def deactivate(self) -> None:
        """Make the mesh that was active before this one active again."""
        if self._token is None:
            return
        if self._mode is not None:
            self._mode.__exit__(None, None, None)
        _active.reset(self._token)
        self._token = None


class _NoMesh:
    """``with no_mesh.activate():`` makes torch local again inside an active mesh."""

    def activate(self) -> Activated:
        return Activated(None)

    def __repr__(self) -> str:
        return "danaus.no_mesh"


no_mesh = _NoMesh()


def get_active_mesh() -> ProcMesh:
    """The mesh torch operations go to; `ValueError` when none is active."""
    activation = _active.get()
    if activation is None:
        raise ValueError("no mesh is active: use `with mesh.activate():`")
    return activation.mesh
