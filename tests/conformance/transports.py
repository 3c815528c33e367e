"""How the conformance suite runs a controller program on each transport.

The real transports run twice: with every proc on this host, and with the
job's procs on another host, a worker of a cluster of three (network
namespaces; see ``tests/cluster.py``). Each test's controller attaches to one
of the three in turn, which is its ``this_host()``: the suite runs on each
host, every proc of it started by a host agent on the far side of a link.
(Attaching all three for every test would start two idle host agents per
test; ``tests/multihost`` has the jobs that span the three.)
"""

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
    options: dict[str, Any]
    """What ``danaus.configure`` takes to select this transport for a test's own program."""
    cluster: bool = False
    """The job runs on a host of the namespace cluster, not on this one."""
    environment: Mapping[str, str] = field(default_factory=dict)
    """What a process needs in its environment to run on this transport."""

    @property
    def id(self) -> str:
        return f"{self.name}-cluster" if self.cluster else self.name


def _run_sim(
    main: Callable[[], Any],
    hosts: int = 2,
    seed: int = 0,
    cast_fanout: int | None = None,
    max_message_bytes: int | None = None,
) -> Any:
    run = danaus.sim.run(
        main, hosts=hosts, seed=seed, cast_fanout=cast_fanout, max_message_bytes=max_message_bytes
    )
    return run.value


def _runner(
    name: str, environment: Mapping[str, str] | None = None, **options: Any
) -> Callable[..., Any]:
    """Run ``main`` as a controller program on a fresh world of transport ``name``.

    ``environment`` is set while it runs (its workers inherit it). Options
    given to the runner (a cluster's workers) join ``options``.
    """

    def run(main: Callable[[], Any], **more: Any) -> Any:
        saved = {key: os.environ.get(key) for key in environment or {}}
        os.environ.update(environment or {})
        try:
            danaus.configure(transport=name, **options, **more)
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
    """The transports this machine can run, simulator first, clusters last."""
    real = ["tcp"]
    if importlib.util.find_spec("ucxx") is not None:
        real.append("ucx")
    found = [Transport("sim", _run_sim, real=False, options={"hosts": 2})]
    found += [
        Transport(name, _runner(name, **FAST_HEARTBEATS), real=True, options=FAST_HEARTBEATS)
        for name in real
    ]
    found.append(
        Transport(
            "verbs",
            _runner("verbs", EMULATED_VERBS, **FAST_HEARTBEATS),
            real=True,
            options=FAST_HEARTBEATS,
            environment=EMULATED_VERBS,
        )
    )
    found += [
        Transport(
            name, _runner(name, **FAST_HEARTBEATS), real=True, options=FAST_HEARTBEATS, cluster=True
        )
        for name in real
    ]
    return found
