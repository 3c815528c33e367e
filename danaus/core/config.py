"""Choosing a transport: ``configure()``, ``DANAUS_TRANSPORT``, and the current world.

The world is made on first use (``this_host()``, ``this_proc()``, a spawn) from
the configuration: ``configure(transport=..., **options)`` if called, else the
``DANAUS_TRANSPORT`` environment variable, else ``tcp``. Options go to the
transport's ``create_world``.
"""

from __future__ import annotations

import atexit
import importlib
import os
from typing import Any

from danaus.transports.base import World

DEFAULT_TRANSPORT = "tcp"
TRANSPORTS = ("sim", "tcp", "ucx", "verbs")

_settings: dict[str, Any] = {}
_world: World | None = None


def selected() -> str:
    """The name of the transport the next world will use."""
    return _settings.get("transport") or os.environ.get("DANAUS_TRANSPORT") or DEFAULT_TRANSPORT


def configure(transport: str | None = None, **options: Any) -> None:
    """Choose the transport (``sim``, ``tcp``, ``ucx``, ``verbs``) and its options.

    Call before anything else touches Danaus; to switch later, call
    ``danaus.shutdown()`` first.
    """
    if _world is not None:
        raise RuntimeError(
            f"Danaus already runs on {_world.name!r}; call danaus.shutdown() before configure()"
        )
    name = transport or selected()
    if name not in TRANSPORTS:
        raise ValueError(f"unknown transport {name!r}; choose one of {', '.join(TRANSPORTS)}")
    _settings.clear()
    _settings.update(options, transport=name)
    transport_module(name).configured(**options)


def transport_module(name: str) -> Any:
    """The package of transport ``name``: it has ``World``, ``configured`` and ``create_world``."""
    if name not in TRANSPORTS:
        raise ValueError(f"unknown transport {name!r}; choose one of {', '.join(TRANSPORTS)}")
    try:
        return importlib.import_module(f"danaus.transports.{name}")
    except ModuleNotFoundError as exc:
        if exc.name != f"danaus.transports.{name}":
            raise
        raise NotImplementedError(f"the {name!r} transport is not available yet") from None


def current_world() -> World:
    """The world this process runs on, made on first use."""
    global _world
    if _world is None:
        options = {k: v for k, v in _settings.items() if k != "transport"}
        module = transport_module(selected())
        module.configured(**options)
        install(module.create_world(**options))
    assert _world is not None
    return _world


def installed() -> World | None:
    """The current world, if one has been made."""
    return _world


def install(world: World | None) -> World | None:
    """Make ``world`` the current one; return the previous one."""
    global _world
    previous, _world = _world, world
    return previous


def shutdown() -> None:
    """Stop everything this process started and forget the world (a new one is made on next use)."""
    if _world is not None:
        try:
            _world.shutdown()
        finally:
            install(None)


atexit.register(shutdown)
