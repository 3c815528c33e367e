"""The ``sim`` transport: a deterministic discrete-event simulation of a cluster."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from danaus.core import config
from danaus.core.settings import Settings
from danaus.core.trace import Trace
from danaus.transports.sim.loop import SimulationStalled, SimulationTimeLimit, VirtualTimeLoop
from danaus.transports.sim.network import NetworkModel
from danaus.transports.sim.world import SimWorld

__all__ = [
    "OPTIONS",
    "NetworkModel",
    "SimRun",
    "SimWorld",
    "SimulationStalled",
    "SimulationTimeLimit",
    "World",
    "configured",
    "create_world",
    "loop_factory",
    "route_asyncio_run",
    "run",
]


World = SimWorld
"""The world class of this transport."""

OPTIONS = frozenset({"hosts", "seed", "network", "time_limit", "schedule_seed", "trace_dir"})
"""The settings the simulator takes besides those of every transport."""


def create_world(settings: Settings) -> SimWorld:
    """A simulated world made from ``settings`` (`configured` has checked them)."""
    try:
        running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    # Importing danaus leaves asyncio alone, so a program whose first use of Danaus is inside
    # asyncio.run is already on asyncio's own loop: the simulated procs could never run there.
    if running is not None and not isinstance(running, VirtualTimeLoop):
        raise RuntimeError(
            "Danaus runs on the simulator, whose own event loop must run this program's async "
            "code, but the program's first use of Danaus came on another loop (inside "
            "asyncio.run, say): call danaus.configure() before asyncio.run, or run the "
            "coroutine with loop_factory=danaus.sim.loop_factory"
        )
    return SimWorld(settings)


def _main_loop() -> VirtualTimeLoop | None:
    """The current world's loop, for ``asyncio.run`` or a ``Runner``; None if it is not simulated.

    Its meshes outlive each ``Runner.run`` call, and the runner or
    ``asyncio.run`` that uses it too while procs the program spawned live.
    """
    world = config.current_world()
    if not isinstance(world, SimWorld) or world.loop.is_closed():
        return None
    return world.loop


def loop_factory() -> VirtualTimeLoop:
    """The simulator's event loop, for ``asyncio.run(main(), loop_factory=loop_factory)``.

    Also for ``asyncio.Runner(loop_factory=loop_factory)``. The simulator must
    be selected (``danaus.configure(transport="sim", ...)`` or ``DANAUS_TRANSPORT=sim``).
    """
    if config.installed() is None and config.selected() != "sim":
        raise RuntimeError(
            f"danaus.sim.loop_factory needs the simulator, but {config.selected()!r} is selected: "
            'call danaus.configure(transport="sim", ...) first, or set DANAUS_TRANSPORT=sim'
        )
    loop = _main_loop()
    if loop is None:
        world = config.current_world()
        raise RuntimeError(
            f"danaus.sim.loop_factory needs the simulator, but Danaus runs on {world.name!r} "
            "(or its simulated world has shut down): call danaus.shutdown() and configure sim"
        )
    return loop


class _SimLoopPolicy(asyncio.AbstractEventLoopPolicy):
    """Makes ``asyncio.run(main())`` run on the simulator's virtual-time loop.

    It wraps the policy that was in place and forwards everything to it but
    ``new_event_loop``, so the loops other threads have set stay theirs.
    """

    def __init__(self, previous: asyncio.AbstractEventLoopPolicy) -> None:
        self.previous = previous

    def new_event_loop(self) -> asyncio.AbstractEventLoop:
        if config.installed() is not None or config.selected() == "sim":
            loop = _main_loop()
            if loop is not None:
                return loop
        return self.previous.new_event_loop()

    def get_event_loop(self) -> asyncio.AbstractEventLoop:
        return self.previous.get_event_loop()

    def set_event_loop(self, loop: asyncio.AbstractEventLoop | None) -> None:
        self.previous.set_event_loop(loop)

    if hasattr(asyncio.AbstractEventLoopPolicy, "get_child_watcher"):  # Python < 3.14

        def get_child_watcher(self) -> Any:
            return self.previous.get_child_watcher()

        def set_child_watcher(self, watcher: Any) -> None:
            self.previous.set_child_watcher(watcher)


def configured(settings: Settings) -> None:
    """Check what the simulator needs of ``settings``, and route ``asyncio.run`` to its loop."""
    _check_network(settings)
    route_asyncio_run()


def _check_network(settings: Settings) -> None:
    if settings.network is not None and not isinstance(settings.network, NetworkModel):
        raise TypeError(f"network must be a danaus.sim.NetworkModel, not {settings.network!r}")


def route_asyncio_run() -> None:
    """Make ``asyncio.run(main())`` run on the simulated world's loop while sim is selected.

    asyncio has no hook for that but its event-loop policy: this wraps the one
    in place (once), and only ``new_event_loop`` changes.
    """
    current = asyncio.get_event_loop_policy()
    if not isinstance(current, _SimLoopPolicy):
        asyncio.set_event_loop_policy(_SimLoopPolicy(current))


@dataclass
class SimRun:
    """What a simulated run returned, its trace, and how long it took in simulated seconds."""

    value: Any
    trace: Trace
    time: float
    seed: int
    schedule_seed: int = 0

    @property
    def digest(self) -> str:
        return self.trace.digest()


def run(
    main: Callable[[], Any],
    *,
    hosts: int = 1,
    seed: int = 0,
    network: NetworkModel | None = None,
    schedule_seed: int | None = None,
    cast_fanout: int | None = None,
    max_message_bytes: int | None = None,
) -> SimRun:
    """Run ``main`` (sync or async) on a fresh simulated cluster of ``hosts`` hosts.

    Inside ``main``, ``this_host()`` is the controller's host and
    ``danaus.hosts()`` all of them, and ``asyncio.run`` runs on the simulator's
    loop. Every mesh is stopped when ``main`` returns.
    ``schedule_seed`` (by default ``$DANAUS_SCHEDULE_SEED``, else 0) picks the
    interleaving of concurrent events to explore; 0 is the default one.
    ``cast_fanout`` is as for ``danaus.configure`` (None: ``$DANAUS_CAST_FANOUT``,
    else 8); ``max_message_bytes`` (None: no limit) bounds the payload of each
    message, as on the real transports. The other settings come from the
    environment, as for any world, not from ``configure``.
    """
    given = {
        "hosts": hosts,
        "seed": seed,
        "network": network,
        "max_message_bytes": max_message_bytes,
        "schedule_seed": schedule_seed,
        "cast_fanout": cast_fanout,
    }
    settings = Settings.from_environment().given(
        **{name: value for name, value in given.items() if value is not None}
    )
    _check_network(settings)
    route_asyncio_run()
    world = SimWorld(settings)
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
    return SimRun(
        value=value,
        trace=world.trace,
        time=world.timeline.now,
        seed=seed,
        schedule_seed=world.schedule_seed,
    )
