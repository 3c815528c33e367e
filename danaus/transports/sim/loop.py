"""An asyncio event loop whose clock is a SimPy environment's virtual time.

asyncio's loop asks its selector to wait for I/O until the next timer is due.
Here the "selector" instead advances the SimPy environment: it processes
simulation events (message deliveries, faults) up to that moment, and returns
early as soon as one of them schedules a callback on the loop. So
``await asyncio.sleep(5)`` takes five simulated seconds and no real time, and
timers and network events interleave in one deterministic order.

When the loop would wait with no timer and no simulation event left, nothing
can ever happen again: the loop raises `SimulationStalled` instead of hanging.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from typing import Any

import simpy


class SimulationStalled(RuntimeError):
    """The simulated program waits for something that can never happen (a deadlock)."""


class SimulationTimeLimit(RuntimeError):
    """The simulation ran past its time limit (a livelock, or a workload that never ends)."""


class _VirtualSelector:
    def __init__(self, loop: VirtualTimeLoop, env: simpy.Environment) -> None:
        self._loop = loop
        self._env = env

    def select(self, timeout: float | None) -> list[Any]:
        if timeout == 0:
            return []
        env = self._env
        deadline = math.inf if timeout is None else env.now + timeout
        limit = self._loop.time_limit
        capped = deadline > limit
        if capped:
            deadline = limit
        while True:
            upcoming = env.peek()
            if upcoming == math.inf or upcoming > deadline:
                break
            env.step()
            if self._loop._ready:
                return []
        if capped:
            raise SimulationTimeLimit(f"the simulation ran past its time limit of {limit:g} s")
        if deadline == math.inf:
            message = (
                "the simulation has nothing left to do but the program is still waiting: "
                "a call that can never be answered, or a thread (threads do not run on sim)"
            )
            describe = self._loop.describe_stall
            detail = describe() if describe is not None else ""
            raise SimulationStalled(f"{message}\n{detail}" if detail else message)
        if deadline > env.now:
            env.run(until=deadline)
        return []

    def close(self) -> None:
        pass


class VirtualTimeLoop(asyncio.BaseEventLoop):
    """A single-threaded asyncio loop running on a SimPy environment's clock."""

    def __init__(self, env: simpy.Environment) -> None:
        super().__init__()
        self.env = env
        self._selector = _VirtualSelector(self, env)
        self.before_close: Callable[[], None] | None = None
        self.after_main: Callable[[], None] | None = None
        self.describe_stall: Callable[[], str] | None = None
        self.time_limit = math.inf

    def run_until_complete(self, future: Any) -> Any:
        """Run until ``future`` is done; if it is ``asyncio.run``'s main, run ``after_main`` then.

        ``asyncio.run`` cancels every task left once its main coroutine returns;
        ``after_main`` lets the simulated cluster stop its meshes gracefully first.
        """
        hook, self.after_main = self.after_main, None
        try:
            return super().run_until_complete(future)
        finally:
            if hook is not None:
                hook()

    def time(self) -> float:
        return self.env.now

    def _process_events(self, event_list: list[Any]) -> None:
        pass

    def _write_to_self(self) -> None:
        pass

    def close(self) -> None:
        """Close; a world using this loop gets to shut down first (as under ``asyncio.run``)."""
        if self.before_close is not None and not self.is_closed():
            hook, self.before_close = self.before_close, None
            hook()
        super().close()
