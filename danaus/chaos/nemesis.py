"""The nemesis: applies a plan's faults to a running world, on its clock, and heals them.

On the simulator every kind of fault applies, on virtual time, exactly when
the plan says. On a real transport the crash and pause faults apply, as
signals from the launcher, at the planned wall-clock offsets; the other kinds
need the network model and are reported as skipped.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from danaus.chaos.plan import REAL_KINDS, Fault, Plan
from danaus.core import sites
from danaus.transports.base import World
from danaus.transports.sim.world import SimWorld

NEMESIS = "nemesis"
"""The name the nemesis's events carry in a trace, in place of a proc."""

FAULT_EVENTS = ("fault", "heal", "fault-skipped")
"""The kinds of trace event the nemesis records."""


class Nemesis:
    """Runs ``plan`` against ``world`` from the moment `start` is called."""

    def __init__(self, world: World, plan: Plan) -> None:
        self.world = world
        self.plan = plan
        self.skipped: list[tuple[Fault, str]] = []
        self._heals: dict[int, Callable[[], None]] = {}
        self._timers: list[asyncio.TimerHandle] = []

    def start(self) -> None:
        """Schedule the plan's faults from now (from any thread)."""
        self.world.root.on_loop(self._schedule)

    def _schedule(self) -> None:
        for index, fault in enumerate(self.plan):
            self._timers.append(self.world.loop.call_later(fault.at, self._apply, index, fault))

    def heal_all(self) -> None:
        """Cancel faults still to come and heal those still active."""
        for timer in self._timers:
            timer.cancel()
        for index in sorted(self._heals):
            self._heals[index]()

    # ---- applying ---------------------------------------------------------------------

    def _apply(self, index: int, fault: Fault) -> None:
        if not isinstance(self.world, SimWorld) and fault.kind not in REAL_KINDS:
            self._skip(fault, "needs the simulator")
            return
        try:
            heal = self._fault(fault)
        except _Skip as skip:
            self._skip(fault, str(skip))
            return
        self.world.trace.record("fault", NEMESIS, fault=fault.describe())
        if heal is not None:

            def healed() -> None:
                if self._heals.pop(index, None) is not None:
                    heal()
                    self.world.trace.record("heal", NEMESIS, fault=fault.describe())

            self._heals[index] = healed
            self._timers.append(self.world.loop.call_later(fault.duration, healed))

    def _skip(self, fault: Fault, why: str) -> None:
        self.skipped.append((fault, why))
        self.world.trace.record("fault-skipped", NEMESIS, fault=fault.describe(), why=why)

    def _fault(self, fault: Fault) -> Callable[[], None] | None:
        world = self.world
        kind = fault.kind
        if kind == "crash":
            world.inject("crash", self._proc(fault))
            return None
        if kind == "pause":
            proc = self._proc(fault)
            world.inject("pause", proc)
            return lambda: world.inject("resume", proc)
        if kind == "raise":
            return self._raise(fault)
        assert isinstance(world, SimWorld)
        network = world.network
        if kind == "crash_host":
            procs = self._workers(fault.target[0])
            if not procs:
                raise _Skip("no worker procs on that host")
            for proc in procs:
                world.inject("crash", proc)
            return None
        if kind == "slow":
            endpoint = network.endpoints[self._proc(fault)]
            endpoint.slowness += fault.amount
            return lambda: _lower(endpoint, "slowness", fault.amount)
        if kind == "bandwidth":
            host = network.hosts[self._host(fault.target[0])]
            factor = max(fault.amount, 1e-6)
            host.bandwidth_factor *= factor
            return lambda: _divide(host, "bandwidth_factor", factor)
        if kind == "delay":
            links = [network.link(src, dst) for src, dst in self._link(fault)]
            for link in links:
                link.extra_latency += fault.amount
                link.jitter += fault.amount / 2

            def heal_delay() -> None:
                for link in links:
                    _lower(link, "extra_latency", fault.amount)
                    _lower(link, "jitter", fault.amount / 2)

            return heal_delay
        if kind == "clog":
            pairs = self._link(fault)
        else:
            side = [self._host(h) for h in fault.target]
            rest = [h for h in world.hosts() if h not in side]
            if not rest:
                raise _Skip("the partition has no other side")
            pairs = self._pairs(side, rest, one_way=fault.one_way)
        for src, dst in pairs:
            network.hold(src, dst)

        def heal_links() -> None:
            for src, dst in pairs:
                network.release(src, dst)

        return heal_links

    def _raise(self, fault: Fault) -> Callable[[], None]:
        if sites.active is None:
            raise _Skip("fault sites are off")
        rules = sites.active.raises
        key = (str(fault.target[0]), str(fault.target[1]))
        rules[key] = fault.amount or 1.0
        return lambda: rules.pop(key, None) and None

    # ---- targets ----------------------------------------------------------------------

    def _host(self, index: int) -> str:
        hosts = self.world.hosts()
        return hosts[int(index) % len(hosts)]

    def _workers(self, host_index: int) -> list[str]:
        return self.world.worker_procs(self._host(host_index))

    def _proc(self, fault: Fault) -> str:
        workers = self._workers(fault.target[0])
        if not workers:
            raise _Skip("no worker procs on that host")
        return workers[int(fault.target[1]) % len(workers)]

    def _pairs(self, side: list[str], other: list[str], one_way: bool) -> list[tuple[str, str]]:
        pairs = [(a, b) for a in side for b in other if a != b]
        if not one_way:
            pairs += [(b, a) for a, b in pairs]
        if not pairs:
            raise _Skip("the link joins a host to itself")
        return pairs

    def _link(self, fault: Fault) -> list[tuple[str, str]]:
        """Both directions between the two hosts of a delay or clog."""
        a, b = self._host(fault.target[0]), self._host(fault.target[1])
        return self._pairs([a], [b], one_way=False)


class _Skip(Exception):
    """A fault that cannot apply now (its target does not exist)."""


def _lower(obj: Any, attribute: str, amount: float) -> None:
    setattr(obj, attribute, max(0.0, getattr(obj, attribute) - amount))


def _divide(obj: Any, attribute: str, factor: float) -> None:
    setattr(obj, attribute, getattr(obj, attribute) / factor)
