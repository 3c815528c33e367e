"""How the conformance suite runs a controller program on each transport."""

from __future__ import annotations

import asyncio
import importlib.util
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import danaus
import danaus.sim


@dataclass(frozen=True)
class Transport:
    name: str
    run: Callable[..., Any]
    real: bool
    options: dict[str, Any]
    """What ``danaus.configure`` takes to select this transport for a test's own program."""


def _run_sim(main: Callable[[], Any], hosts: int = 2, seed: int = 0) -> Any:
    return danaus.sim.run(main, hosts=hosts, seed=seed).value


def _runner(name: str, **options: Any) -> Callable[..., Any]:
    """Run ``main`` as a controller program on a fresh world of transport ``name``."""

    def run(main: Callable[[], Any], **_: Any) -> Any:
        danaus.configure(transport=name, **options)
        try:
            if inspect.iscoroutinefunction(main):
                return asyncio.run(main())
            return main()
        finally:
            danaus.shutdown()

    return run


FAST_HEARTBEATS = {"heartbeat_interval": 0.2, "heartbeat_timeout": 1.5}


def available() -> list[Transport]:
    """The transports this machine can run, simulator first."""
    found = [
        Transport("sim", _run_sim, real=False, options={"hosts": 2}),
        Transport("tcp", _runner("tcp", **FAST_HEARTBEATS), real=True, options=FAST_HEARTBEATS),
    ]
    if importlib.util.find_spec("ucxx") is not None:
        found.append(
            Transport("ucx", _runner("ucx", **FAST_HEARTBEATS), real=True, options=FAST_HEARTBEATS)
        )
    return found
