"""Controllers: actors of which the whole job has one per name (`get_or_spawn_controller`).

Every controller lives in the controller's process (the root proc), spawned
by one registry actor there, which the root proc's agent starts on first use.
Code anywhere (the controller's main code or any actor on any proc) asks the
root proc's agent, so two requests for one name, from wherever and however
close together, get the same actor.
"""

from __future__ import annotations

import inspect
import logging
from typing import Any, TypeVar

from danaus.core.actor import Actor, endpoint
from danaus.core.future import Future
from danaus.core.mesh import ActorMesh, agent_of, this_proc
from danaus.core.supervision import MeshFailure
from danaus.core.transport import ROOT

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
    return agent_of(ROOT).get_or_spawn_controller.call_one(name, Class, args, kwargs)


class ControllerRegistry(Actor):
    """Spawns and remembers the job's controllers (one instance, in the root proc)."""

    def __init__(self) -> None:
        self._controllers: dict[str, ActorMesh[Any] | MeshFailure] = {}
        self._names: dict[str, str] = {}
        """Controller name by mesh id."""

    @endpoint
    def get_or_spawn(
        self, name: str, cls: type[Actor], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> ActorMesh[Any]:
        found = self._controllers.get(name)
        if found is None:
            found = self._controllers[name] = this_proc().spawn(name, cls, *args, **kwargs)
            self._names[found._mesh_id] = name
        if isinstance(found, MeshFailure):
            raise ValueError(f"controller {name!r} has failed: {found}")
        return found

    def __supervise__(self, failure: MeshFailure) -> bool:
        """A controller failed: remember it (asking for it again raises) and go no further."""
        name = self._names.get(failure.mesh_id)
        if name is None:
            return False
        if not isinstance(self._controllers.get(name), MeshFailure):
            log.warning("controller %r failed: %s", name, failure.report())
            self._controllers[name] = failure
        return True
