"""The nemesis: applies a plan's faults to a running world, on its clock, and heals them.

It asks the world's `Faults` for each fault, which returns what heals it. On
the simulator every kind of fault applies, on virtual time, exactly when the
plan says. A real transport applies the kinds it can make happen for real
(crashes and pauses, through the launcher's signals), at the planned
wall-clock offsets; the others are reported as skipped, with the reason.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from danaus.chaos.plan import Fault, Plan
from danaus.core import trace as ev
from danaus.core.faults import FaultUnsupported, Heal
from danaus.core.transport import World

NEMESIS = "nemesis"
"""The name the nemesis's events carry in a trace, in place of a proc."""


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

    def _apply(self, index: int, fault: Fault) -> None:
        try:
            heal = self._fault(fault)
        except FaultUnsupported as why:
            self.skipped.append((fault, str(why)))
            self.world.trace.record(
                ev.FaultSkipped(proc=NEMESIS, fault=fault.describe(), why=str(why))
            )
            return
        self.world.trace.record(ev.FaultApplied(proc=NEMESIS, fault=fault.describe()))
        if heal is not None:

            def healed() -> None:
                if self._heals.pop(index, None) is not None:
                    heal()
                    self.world.trace.record(ev.FaultHealed(proc=NEMESIS, fault=fault.describe()))

            self._heals[index] = healed
            self._timers.append(self.world.loop.call_later(fault.duration, healed))

    def _fault(self, fault: Fault) -> Heal | None:
        faults = self.world.faults
        kind = fault.kind
        if kind == "crash":
            faults.crash(self._proc(fault))
            return None
        if kind == "crash_host":
            faults.crash_host(self._host(fault.target[0]))
            return None
        if kind == "pause":
            return faults.pause(self._proc(fault))
        if kind == "clock_jump":
            return faults.clock_jump(self._proc(fault), fault.amount)
        if kind == "slow_cpu":
            return faults.slow_cpu(self._proc(fault), fault.amount)
        if kind == "pause_thread":
            return faults.pause_thread(self._proc(fault), int(fault.target[2]))
        if kind in ("raise", "throw"):
            sites = self.world.sites
            if sites is None:
                raise FaultUnsupported("fault sites are off")
            mesh, endpoint = (str(t) for t in fault.target)
            if kind == "throw":
                return sites.throw_at(mesh, endpoint, fault.error, int(fault.amount))
            return sites.raise_at(mesh, endpoint, fault.amount or 1.0)
        if kind == "slow":
            return faults.slow(self._proc(fault), fault.amount)
        if kind == "bandwidth":
            return faults.bandwidth(self._host(fault.target[0]), max(fault.amount, 1e-6))
        if kind in ("delay", "clog"):
            a, b = self._host(fault.target[0]), self._host(fault.target[1])
            if a == b:
                raise FaultUnsupported("the link joins a host to itself")
            return faults.delay(a, b, fault.amount) if kind == "delay" else faults.clog(a, b)
        side = [self._host(h) for h in fault.target]
        rest = [h for h in self.world.hosts() if h not in side]
        if not rest:
            raise FaultUnsupported("the partition has no other side")
        return faults.partition(side, rest, one_way=fault.one_way)

    def _host(self, index: int) -> str:
        hosts = self.world.hosts()
        return hosts[int(index) % len(hosts)]

    def _proc(self, fault: Fault) -> str:
        workers = self.world.faults.workers(self._host(fault.target[0]))
        if not workers:
            raise FaultUnsupported("no worker procs on that host")
        return workers[int(fault.target[1]) % len(workers)]
