"""The ``sim`` transport: a deterministic discrete-event simulation of a cluster."""

from __future__ import annotations

import asyncio
import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from danaus.core import config
from danaus.core.trace import Trace
from danaus.transports.sim.loop import SimulationStalled
from danaus.transports.sim.network import NetworkModel
from danaus.transports.sim.world import SimWorld

__all__ = [
    "NetworkModel",
    "SimRun",
    "SimWorld",
    "SimulationStalled",
    "World",
    "configured",
    "create_world",
    "route_asyncio_run",
    "run",
]


World = SimWorld
"""The world class of this transport."""


def create_world(**options: Any) -> SimWorld:
    return SimWorld(**options)


class _SimLoopPolicy(asyncio.DefaultEventLoopPolicy):
    """Makes ``asyncio.run(main())`` run on the simulator's virtual-time loop."""

    def new_event_loop(self) -> asyncio.AbstractEventLoop:
        if config.installed() is None and config.selected() != "sim":
            return super().new_event_loop()
        world = config.current_world()
        if isinstance(world, SimWorld) and not world.loop.is_closed():
            world.loop.after_main = world.finish_main
            return world.loop
        return super().new_event_loop()


def configured(
    hosts: int = 1,
    seed: int = 0,
    network: NetworkModel | None = None,
    time_limit: float = math.inf,
) -> None:
    """Check the options and route ``asyncio.run`` to the simulator's loop."""
    if not isinstance(hosts, int) or isinstance(hosts, bool) or hosts < 1:
        raise ValueError(f"hosts must be a positive int, got {hosts!r}")
    route_asyncio_run()


def route_asyncio_run() -> None:
    """Route ``asyncio.run`` to the simulator, keeping the loop each thread has set.

    A fresh policy would forget the loops that running threads set on the old
    one, and threads that look theirs up later (ucxx's notifier, for one) would
    break; so the new policy takes over the old one's per-thread state.
    """
    current = asyncio.get_event_loop_policy()
    if isinstance(current, _SimLoopPolicy):
        return
    policy = _SimLoopPolicy()
    if isinstance(current, asyncio.events.BaseDefaultEventLoopPolicy):
        policy._local = current._local
    asyncio.set_event_loop_policy(policy)


@dataclass
class SimRun:
    """What a simulated run returned, its trace, and how long it took in simulated seconds."""

    value: Any
    trace: Trace
    time: float
    seed: int

    @property
    def digest(self) -> str:
        return self.trace.digest()


def run(
    main: Callable[[], Any],
    *,
    hosts: int = 1,
    seed: int = 0,
    network: NetworkModel | None = None,
) -> SimRun:
    """Run ``main`` (sync or async) on a fresh simulated cluster of ``hosts`` hosts.

    Inside ``main``, ``this_host()`` is the controller's host and
    ``danaus.hosts()`` all of them. Every mesh is stopped when ``main`` returns.
    """
    world = SimWorld(hosts=hosts, seed=seed, network=network)
    previous = config.install(world)
    try:
        if inspect.iscoroutinefunction(main):
            value = world.loop.run_until_complete(main())
        else:
            value = main()
    finally:
        try:
            world.shutdown()
        finally:
            config.install(previous)
    return SimRun(value=value, trace=world.trace, time=world.env.now, seed=seed)
