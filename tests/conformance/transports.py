"""How the conformance suite runs a controller program on each transport."""

from __future__ import annotations

import asyncio
import importlib.util
import inspect
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import danaus
import danaus.sim


@dataclass(frozen=True)
class Transport:
    name: str
    run: Callable[..., Any]
    real: bool
    environment: Mapping[str, str] = field(default_factory=dict)
    """What a process needs in its environment to run on this transport."""


def _run_sim(main: Callable[[], Any], hosts: int = 2, seed: int = 0) -> Any:
    return danaus.sim.run(main, hosts=hosts, seed=seed).value


def _runner(
    name: str, environment: Mapping[str, str] | None = None, **options: Any
) -> Callable[..., Any]:
    """Run ``main`` as a controller program on a fresh world of transport ``name``.

    ``environment`` is set while it runs (its workers inherit it).
    """

    def run(main: Callable[[], Any], **_: Any) -> Any:
        saved = {key: os.environ.get(key) for key in environment or {}}
        os.environ.update(environment or {})
        try:
            danaus.configure(transport=name, **options)
            try:
                if inspect.iscoroutinefunction(main):
                    return asyncio.run(main())
                return main()
            finally:
                danaus.shutdown()
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value

    return run


FAST_HEARTBEATS = {"heartbeat_interval": 0.2, "heartbeat_timeout": 1.5}
EMULATED_VERBS = {"DANAUS_VERBS_PROVIDER": "emulated"}
"""verbs runs everywhere on the device emulated between processes (no RDMA hardware here)."""


def available() -> list[Transport]:
    """The transports this machine can run, simulator first."""
    found = [
        Transport("sim", _run_sim, real=False),
        Transport("tcp", _runner("tcp", **FAST_HEARTBEATS), real=True),
    ]
    if importlib.util.find_spec("ucxx") is not None:
        found.append(Transport("ucx", _runner("ucx", **FAST_HEARTBEATS), real=True))
    verbs = _runner("verbs", EMULATED_VERBS, **FAST_HEARTBEATS)
    found.append(Transport("verbs", verbs, real=True, environment=EMULATED_VERBS))
    return found
