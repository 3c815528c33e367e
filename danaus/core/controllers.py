"""Controllers: actors of which the whole job has one per name (`get_or_spawn_controller`).

Every controller lives in the controller's process (the root proc), spawned
by one registry actor there, which the controller's code owns and stops last.
Code anywhere (the controller's main code or any actor on any proc) asks
through the root proc's agent (`ProcAgent.probe`), which takes one request at a
time: two requests for one name, from wherever and however close together,
get the same actor, and the registry is spawned once.
"""

from __future__ import annotations

import inspect
import logging
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

from danaus.core.actor import Actor, endpoint
from danaus.core.actor_mesh import ActorMesh
from danaus.core.agent_refs import agent_of
from danaus.core.context import reset_context, set_context
from danaus.core.future import Future
from danaus.core.mesh import this_proc
from danaus.core.supervision import MeshFailure, class_path
from danaus.core.transport import ROOT

if TYPE_CHECKING:
    from danaus.core.owned import OwnedMesh
    from danaus.core.runtime import Runtime

log = logging.getLogger("danaus.controllers")

T = TypeVar("T", bound=Actor)


def get_or_spawn_controller(name: str, Class: type[T], *args: Any, **kwargs: Any) -> Future[T]:
    """The job's one actor called ``name``, spawned as ``Class(*args, **kwargs)`` on first use.

    Works the same from the controller's code and from any actor: every caller
    gets (a reference to) the same actor, a mesh of one living in the
    controller's process. Later calls return it whatever their ``Class`` and
    arguments. It is stopped last when the controller shuts down. If it fails,
    the failure is logged and goes no further (the program is not ended), and
    asking for ``name`` again raises `ActorError` (from a `ValueError`).
    """
    if not (isinstance(Class, type) and issubclass(Class, Actor)):
        raise TypeError(f"get_or_spawn_controller needs a subclass of danaus.Actor, got {Class!r}")
    try:
        inspect.signature(Class).bind(*args, **kwargs)
    except TypeError as exc:
        raise TypeError(f"{Class.__qualname__}(): {exc}") from None
    ask = partial(_ask_registry, name, Class, args, kwargs)
    return agent_of(ROOT).probe.call_one(ask)  # type: ignore[no-any-return]


def _ask_registry(
    name: str, cls: type[Actor], args: tuple[Any, ...], kwargs: dict[str, Any], runtime: Runtime
) -> Future[ActorMesh[Any]]:
    """On the root proc: the registry's answer for ``name``."""
    return _registry(runtime).get_or_spawn.call_one(name, cls, args, kwargs)


def _registry(runtime: Runtime) -> ActorMesh[Any]:
    """The controller registry: the controller's code spawns it on first use, and stops it
    after every other mesh it owns."""
    client = runtime.client
    found = _registry_view(client.owned)
    if found is None:
        token = set_context(client.context)
        try:
            this_proc().spawn("controllers", ControllerRegistry)
        finally:
            reset_context(token)
        found = _registry_view(client.owned)
        assert found is not None
        client.stop_last(found)
    assert isinstance(found.mesh, ActorMesh)
    return found.mesh


class ControllerRegistry(Actor):
    """Spawns and remembers the job's controllers (one instance, in the root proc)."""

    def __init__(self) -> None:
        self._controllers: dict[str, ActorMesh[Any] | MeshFailure] = {}

    @endpoint
    def get_or_spawn(
        self, name: str, cls: type[Actor], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> ActorMesh[Any]:
        found = self._controllers.get(name)
        if found is None:
            found = self._controllers[name] = this_proc().spawn(name, cls, *args, **kwargs)
        if isinstance(found, MeshFailure):
            raise ValueError(f"controller {name!r} has failed: {found}")
        return found

    def __supervise__(self, failure: MeshFailure) -> bool:
        """A controller failed: remember it (asking for it again raises) and go no further."""
        name = failure.mesh_name  # each controller is a mesh named after it
        if name not in self._controllers:
            return False
        if not isinstance(self._controllers.get(name), MeshFailure):
            log.warning("controller %r failed: %s", name, failure.report())
            self._controllers[name] = failure
        return True


_REGISTRY_CLASS = class_path(ControllerRegistry)


def _registry_view(owned: list[OwnedMesh]) -> OwnedMesh | None:
    """The view of the controller registry among the meshes the controller's code owns."""
    return next((o for o in owned if o.actor_class == _REGISTRY_CLASS), None)
