"""This process's settings and choice of transport, and the world it runs on.

The world is made on first use (``this_host()``, ``this_proc()``, a spawn) from
this process's `Settings`: those given to ``configure(...)``, else the
environment's (`Settings.from_environment`), else the defaults. The transport
they name checks them (its ``configured``) and makes the world from them (its
``create_world``).

What the process itself holds is only what the user set for it: the settings
given to ``configure`` and which world is current (and ``danaus.unhandled_fault_hook``,
a process-wide setting in Monarch's API too, which the package itself holds).
Everything about a run (its hook if it sets one, fault sites, random source,
trace) belongs to its `World`, so worlds made one after the other share nothing.
"""

from __future__ import annotations

import atexit
import importlib
import inspect
import sys
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

from danaus.core.settings import EVERY_TRANSPORT, TRANSPORTS, Settings, unknown
from danaus.core.supervision import default_unhandled_fault_hook
from danaus.core.transport import FaultHook, World

P = ParamSpec("P")
R = TypeVar("R")

_given: dict[str, Any] = {}
"""The settings given to ``configure``, checked (the environment gives the rest)."""
_world: World | None = None
_exit_registered = False


def settings() -> Settings:
    """This process's settings: those given to ``configure``, else the environment's."""
    return Settings.from_environment().given(**_given)


def setting(name: str) -> Any:
    """One of this process's settings: as ``configure`` gave it, else as the environment does.

    For code that reads one setting, often: it reads one environment variable, not all.
    """
    if name in _given:
        return _given[name]
    return Settings.read(name)


def selected() -> str:
    """The name of the transport the next world will use."""
    return setting("transport")


def _takes_fields_of(
    struct: Callable[P, Any],
) -> Callable[[Callable[..., R]], Callable[P, R]]:
    """Give a function of ``**fields`` the keyword parameters of ``struct``'s fields, for type
    checkers (``P``) and for ``help()`` (its signature), so that they are declared once."""

    def typed(function: Callable[..., R]) -> Callable[P, R]:
        parameters = inspect.signature(struct).parameters.values()
        function.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
            list(parameters), return_annotation=inspect.signature(function).return_annotation
        )
        return function

    return typed


@_takes_fields_of(Settings)
def configure(**fields: Any) -> None:
    """Set this process's settings: the fields of `Settings`, as keyword arguments.

    ``configure(transport="sim", hosts=4)`` chooses the simulator with four
    hosts; a setting not given comes from its environment variable, else its
    default. Call before anything else touches Danaus; to switch later, call
    ``danaus.shutdown()`` first. The settings hold for every world this process
    makes from then on. Raises `TypeError` for a setting the chosen transport
    does not take, naming those it takes, or a value of the wrong type, and
    `ValueError` for a value out of its range.
    """
    global _given
    if _world is not None:
        raise RuntimeError(
            f"Danaus already runs on {_world.name!r}; call danaus.shutdown() before configure()"
        )
    chosen = checked(fields)
    _given = {name: getattr(chosen, name) for name in fields}
    prepared(chosen)


def checked(fields: dict[str, Any]) -> Settings:
    """The environment's settings with ``fields`` in their place, checked by their transport."""
    environment = Settings.from_environment()
    transport = fields.get("transport", environment.transport)
    module = transport_module(transport)
    takes = EVERY_TRANSPORT | module.OPTIONS
    for name in fields:
        if name not in takes:
            raise unknown(name, takes, f"transport {transport!r}")
    chosen = environment.given(**fields)
    module.configured(chosen)
    return chosen


def transport_module(name: str) -> Any:
    """The package of transport ``name``: its ``World``, ``OPTIONS``, ``configured`` and
    ``create_world``."""
    if name not in TRANSPORTS:
        raise ValueError(f"unknown transport {name!r}; choose one of {', '.join(TRANSPORTS)}")
    return importlib.import_module(f"danaus.transports.{name}")


def prepared(chosen: Settings) -> Any:
    """The package of ``chosen``'s transport, ready to make a world from them: what its
    ``prepare`` starts ahead (if it has one) runs while the caller goes on."""
    module = transport_module(chosen.transport)
    prepare = getattr(module, "prepare", None)
    if prepare is not None:
        prepare(chosen)
    return module


def create_world(**fields: Any) -> World:
    """A new world made from the environment's settings with ``fields``; not made current."""
    chosen = checked(fields)
    return prepared(chosen).create_world(chosen)


def current_world() -> World:
    """The world this process runs on, made on first use."""
    if _world is None:
        install(create_world(**_given))
    assert _world is not None
    return _world


def installed() -> World | None:
    """The current world, if one has been made."""
    return _world


def install(world: World | None) -> World | None:
    """Make ``world`` the current one; return the previous one."""
    global _world, _exit_registered
    previous, _world = _world, world
    if world is not None and not _exit_registered:
        atexit.register(shutdown)
        _exit_registered = True
    return previous


def shutdown() -> None:
    """Stop everything this process started and forget the world (a new one is made on next use)."""
    if _world is not None:
        try:
            _world.shutdown()
        finally:
            install(None)


def fault_hook(world: World) -> FaultHook:
    """The hook for failures that reach ``world``'s root: the run's own, else the process's.

    The process's is ``danaus.unhandled_fault_hook``, read from the package where
    users assign it (as Monarch reads its own); a process that never imported
    the package has the default.
    """
    if world.fault_hook is not None:
        return world.fault_hook
    package = sys.modules.get("danaus")
    hook: FaultHook = getattr(package, "unhandled_fault_hook", default_unhandled_fault_hook)
    return hook
