"""Each simulated proc's clocks, as its code reads them, and the faults that make them jump.

Every proc of a simulated world runs in one OS process, on virtual time: the
machine's clocks say nothing about the simulated cluster, and differ from one
run to the next. While a simulated world lives, these functions are replaced;
called by the code of one of its worker procs (an actor's, or a proc's
bootstrap function: `process_end.running_proc`), they read that proc's clocks:

* ``time.time()`` and ``time.time_ns()``: its wall clock, `EPOCH` plus the
  virtual time, plus the offset that clock jumps left it with;
* ``time.monotonic()`` and ``time.monotonic_ns()``: its monotonic clock,
  `BOOTED` plus the virtual time, plus the lead that forward jumps gave it.

Called anywhere else (the controller's code, an actor of the controller's
proc, another thread) they are the standard functions. A module that took a
function before the world began (``from time import time``) keeps the standard
one. ``time.perf_counter()`` and ``time.process_time()`` stay the standard
ones everywhere: they measure the work the OS process does, which is real.

A clock jump (`ProcClocks.jump`) moves what one proc's code reads, and
nothing else: the simulation's time, its timers (``asyncio.sleep``,
``time.sleep``, timeouts, which run on the world's loop) and the order of
everything in it stay as they were, as asyncio's timers on a real machine run
on its monotonic clock, which a step of the wall clock does not move.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from danaus.core.faults import Heal
from danaus.transports.sim.process_end import running_proc

if TYPE_CHECKING:
    from danaus.transports.sim.timeline import Timeline
    from danaus.transports.sim.world import SimWorld

EPOCH = 1_767_225_600.0
"""What a simulated proc's ``time.time()`` reads at virtual time 0: 2026-01-01 00:00 UTC."""

BOOTED = 10_000.0
"""What its ``time.monotonic()`` reads at virtual time 0: as if its machine had been up for a
while, so that code taking 0 for "long ago" works as it does on a real one."""

_REPLACED = ("time", "time_ns", "monotonic", "monotonic_ns")
_standard: dict[str, Any] = {}
"""The functions replaced while a world lives, as they were before."""

_worlds: list[SimWorld] = []
"""The live simulated worlds of this process, oldest first."""


class ProcClocks:
    """The clocks of one world's procs: the simulation's time, moved by the jumps of each."""

    def __init__(self, timeline: Timeline) -> None:
        self._timeline = timeline
        self._offsets: dict[str, float] = {}
        """By proc: how far its wall clock is from the simulation's time."""
        self._leads: dict[str, float] = {}
        """By proc: how far its monotonic clock is ahead of the simulation's time."""

    def wall(self, proc: str) -> float:
        """What ``time.time()`` reads in ``proc`` now."""
        return EPOCH + self._timeline.now + self._offsets.get(proc, 0.0)

    def monotonic(self, proc: str) -> float:
        """What ``time.monotonic()`` reads in ``proc`` now."""
        return BOOTED + self._timeline.now + self._leads.get(proc, 0.0)

    def jump(self, proc: str, seconds: float) -> Heal:
        """``proc``'s wall clock jumps by ``seconds`` (back, if negative), its monotonic clock
        forward by as much if ``seconds`` is positive. The heal sets the wall clock right, as
        a time daemon would; the monotonic clock keeps its lead, since it never goes back."""
        self._offsets[proc] = self._offsets.get(proc, 0.0) + seconds
        if seconds > 0:
            self._leads[proc] = self._leads.get(proc, 0.0) + seconds

        def heal() -> None:
            self._offsets[proc] -= seconds

        return heal


def attach(world: SimWorld) -> None:
    """``world`` starts: from now on its procs' code reads their own clocks."""
    if not _worlds:
        _standard.update((name, getattr(time, name)) for name in _REPLACED)
        time.time = _time
        time.time_ns = _time_ns
        time.monotonic = _monotonic
        time.monotonic_ns = _monotonic_ns
    _worlds.append(world)


def detach(world: SimWorld) -> None:
    """``world`` has shut down; with the last one, the standard functions come back."""
    if world in _worlds:
        _worlds.remove(world)
    if not _worlds and _standard:
        for name in _REPLACED:
            setattr(time, name, _standard[name])


def _time() -> float:
    """``time.time`` (see the module docstring)."""
    running = running_proc()
    if running is None:
        return _standard["time"]()  # type: ignore[no-any-return]
    world, proc = running
    return world.clocks.wall(proc)


def _time_ns() -> int:
    """``time.time_ns`` (see the module docstring)."""
    running = running_proc()
    if running is None:
        return _standard["time_ns"]()  # type: ignore[no-any-return]
    world, proc = running
    return int(world.clocks.wall(proc) * 1e9)


def _monotonic() -> float:
    """``time.monotonic`` (see the module docstring)."""
    running = running_proc()
    if running is None:
        return _standard["monotonic"]()  # type: ignore[no-any-return]
    world, proc = running
    return world.clocks.monotonic(proc)


def _monotonic_ns() -> int:
    """``time.monotonic_ns`` (see the module docstring)."""
    running = running_proc()
    if running is None:
        return _standard["monotonic_ns"]()  # type: ignore[no-any-return]
    world, proc = running
    return int(world.clocks.monotonic(proc) * 1e9)
