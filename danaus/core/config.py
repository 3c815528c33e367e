"""Choosing a transport, and the world this process runs on.

The world is made on first use (``this_host()``, ``this_proc()``, a spawn) from
the choice: ``configure(transport=..., **options)`` if called, else the
``DANAUS_TRANSPORT`` environment variable, else ``tcp``. Options go to the
transport's ``create_world``, except those every world takes (``cast_fanout``).

What the process itself holds is only what the user set for it: that choice
and which world is current (and ``danaus.unhandled_fault_hook``, a process-wide
setting in Monarch's API too, which the package itself holds). Everything about
a run (its hook if it sets one, fault sites, random source, trace) belongs to
its `World`, so worlds made one after the other share nothing.
"""

from __future__ import annotations

import atexit
import importlib
import inspect
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from danaus.core.casting import fanout_from
from danaus.core.suggest import close_names
from danaus.core.supervision import default_unhandled_fault_hook
from danaus.core.transport import FaultHook, World

DEFAULT_TRANSPORT = "tcp"
TRANSPORTS = ("sim", "tcp", "ucx", "verbs")


@dataclass(frozen=True)
class Choice:
    """A transport and its options, as ``configure()`` was given them."""

    transport: str
    options: Mapping[str, Any] = field(default_factory=dict)


_choice: Choice | None = None
_world: World | None = None
_exit_registered = False


def selected() -> str:
    """The name of the transport the next world will use."""
    if _choice is not None:
        return _choice.transport
    return os.environ.get("DANAUS_TRANSPORT") or DEFAULT_TRANSPORT


def configure(
    transport: str | None = None, *, cast_fanout: int | None = None, **options: Any
) -> None:
    """Choose the transport (``sim``, ``tcp``, ``ucx``, ``verbs``) and its options.

    ``cast_fanout`` (every transport; None: ``$DANAUS_CAST_FANOUT``, else 8)
    is how many procs a cast's sender, and each proc that passes it on, sends
    it to at most (`danaus.core.casting`). The other options are the
    transport's; ``max_message_bytes``, which every transport takes, bounds the
    payload of each message (a larger one raises `MessageTooLargeError` where it
    is sent). Call before anything else touches Danaus; to switch later, call
    ``danaus.shutdown()`` first. The choice holds for every world this process
    makes from then on.
    """
    global _choice
    if _world is not None:
        raise RuntimeError(
            f"Danaus already runs on {_world.name!r}; call danaus.shutdown() before configure()"
        )
    name = transport or selected()
    module = transport_module(name)
    _check_names(name, module, options)
    if cast_fanout is not None:
        options["cast_fanout"] = fanout_from(cast_fanout)
    module.configured(**_transport_options(options))
    _choice = Choice(name, dict(options))


def transport_module(name: str) -> Any:
    """The package of transport ``name``: it has ``World``, ``configured`` and ``create_world``."""
    if name not in TRANSPORTS:
        raise ValueError(f"unknown transport {name!r}; choose one of {', '.join(TRANSPORTS)}")
    return importlib.import_module(f"danaus.transports.{name}")


def create_world(transport: str, *, cast_fanout: int | None = None, **options: Any) -> World:
    """A new world of ``transport`` with ``options`` (checked first); not made current."""
    module = transport_module(transport)
    _check_names(transport, module, options)
    fanout = fanout_from(cast_fanout)
    module.configured(**options)
    return module.create_world(cast_fanout=fanout, **options)


def _check_names(transport: str, module: Any, options: Mapping[str, Any]) -> None:
    """A `TypeError` for an option ``transport`` does not take, naming the ones it takes."""
    takes = [*inspect.signature(module.configured).parameters, "cast_fanout"]
    for name in options:
        if name not in takes:
            raise TypeError(
                f"configure(): transport {transport!r} has no option {name!r}"
                f"{close_names(name, takes)}; its options: {', '.join(sorted(takes))}"
            )


def _transport_options(options: dict[str, Any]) -> dict[str, Any]:
    """``options`` but those every world takes, which are no transport's business."""
    return {key: value for key, value in options.items() if key != "cast_fanout"}


def current_world() -> World:
    """The world this process runs on, made on first use."""
    if _world is None:
        options = dict(_choice.options) if _choice is not None else {}
        install(create_world(selected(), **options))
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
