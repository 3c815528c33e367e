"""How the conformance suite runs a controller program on each transport.

The real transports run twice: with every proc on this host, and with the
job's procs on a cluster of three hosts (network namespaces, each running a
worker; see ``tests/cluster.py``), where ``this_host()`` in the controller is
one of them, a different one for each test.
"""

from __future__ import annotations

import asyncio
import importlib.util
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import danaus
import danaus.sim
from tests.cluster import CLUSTER_SIZE


@dataclass(frozen=True)
class Transport:
    name: str
    run: Callable[..., Any]
    real: bool
    hosts: int = 1
    """More than one: the job runs on a cluster of that many hosts."""

    @property
    def id(self) -> str:
        return self.name if self.hosts == 1 else f"{self.name}-{self.hosts}hosts"


def _run_sim(main: Callable[[], Any], hosts: int = 2, seed: int = 0) -> Any:
    return danaus.sim.run(main, hosts=hosts, seed=seed).value


def _runner(name: str, **options: Any) -> Callable[..., Any]:
    """Run ``main`` as a controller program on a fresh world of transport ``name``.

    Options given to the runner (a cluster's workers) join ``options``.
    """

    def run(main: Callable[[], Any], **more: Any) -> Any:
        danaus.configure(transport=name, **options, **more)
        try:
            if inspect.iscoroutinefunction(main):
                return asyncio.run(main())
            return main()
        finally:
            danaus.shutdown()

    return run


FAST_HEARTBEATS = {"heartbeat_interval": 0.2, "heartbeat_timeout": 1.5}


def available() -> list[Transport]:
    """The transports this machine can run, simulator first, clusters last."""
    real = ["tcp"]
    if importlib.util.find_spec("ucxx") is not None:
        real.append("ucx")
    found = [Transport("sim", _run_sim, real=False)]
    found += [Transport(name, _runner(name, **FAST_HEARTBEATS), real=True) for name in real]
    found += [
        Transport(name, _runner(name, **FAST_HEARTBEATS), real=True, hosts=CLUSTER_SIZE)
        for name in real
    ]
    return found
