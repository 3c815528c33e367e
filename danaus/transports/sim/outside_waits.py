"""Waits outside Danaus run on virtual time while a simulated world runs.

A program that blocks on something other than a Danaus future, such as
``threading.Event.wait(timeout=15)`` until a fault hook sets the event, would
stall the simulation: the hook can only run on the simulator's loop, which is
on the very thread that blocks. So while a simulated world is alive, the waits
below, when made on the world's thread, run the world on instead of blocking:
the simulation advances (in virtual time) until what they wait for happens or
their timeout passes in virtual time, and they return then. Everywhere else
they are the standard functions: on other threads, with no live simulated
world, and while a thread started since the world began runs (a wait may then
be for it, which only real time can bring about).

Interposed, and restored to the very same functions when the last simulated
world shuts down:

* ``threading.Condition.wait`` and ``wait_for``: and so ``threading.Event.wait``,
  ``concurrent.futures.Future.result``/``exception`` and ``concurrent.futures.wait``;
* ``queue.Queue.get`` and ``put``;
* ``time.sleep``.

How a wait runs the world depends on where the waiting code runs (see
``danaus.core.blocking``): sync controller code runs the idle loop until the
wait ends; sync actor code, in a greenlet, switches back to the loop; async
code, inside one of the loop's callbacks, runs the loop on from there
(`VirtualTimeLoop.run_nested`), holding back the callbacks of the blocked
actor (or of the controller's tasks), which a real transport could not run
on its blocked thread either.
"""

from __future__ import annotations

import _thread
import asyncio
import contextlib
import math
import queue
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from danaus.core.blocking import block_on

if TYPE_CHECKING:
    from danaus.transports.sim.world import SimWorld

_condition_wait = threading.Condition.wait
_condition_wait_for = threading.Condition.wait_for
_queue_get = queue.Queue.get
_queue_put = queue.Queue.put
_sleep = time.sleep

_worlds: dict[SimWorld, frozenset[threading.Thread]] = {}
"""The live simulated worlds of this process, newest last, with the threads that ran before each."""


def attach(world: SimWorld) -> None:
    """``world`` starts: waits on its thread run it from now on."""
    if not _worlds:
        threading.Condition.wait = _virtual_condition_wait  # type: ignore[method-assign]
        threading.Condition.wait_for = _virtual_condition_wait_for  # type: ignore[method-assign]
        queue.Queue.get = _virtual_queue_get  # type: ignore[method-assign]
        queue.Queue.put = _virtual_queue_put  # type: ignore[method-assign]
        time.sleep = _virtual_sleep
    _worlds[world] = frozenset(threading.enumerate())


def detach(world: SimWorld) -> None:
    """``world`` has shut down; with the last one, the standard functions come back."""
    _worlds.pop(world, None)
    if not _worlds:
        threading.Condition.wait = _condition_wait  # type: ignore[method-assign]
        threading.Condition.wait_for = _condition_wait_for  # type: ignore[method-assign]
        queue.Queue.get = _queue_get  # type: ignore[method-assign]
        queue.Queue.put = _queue_put  # type: ignore[method-assign]
        time.sleep = _sleep


def _world_here() -> SimWorld | None:
    """The world whose loop a wait made here must run, or None for a standard wait.

    None as well while a thread started since the world began runs: the wait
    may then be one that thread ends (``Thread.start`` waits for the new
    thread, for one), which no amount of simulation could bring about.
    """
    running = asyncio._get_running_loop()
    ident = threading.get_ident()
    for world in reversed(_worlds):
        if world.thread == ident and not world.loop.is_closed():
            if running is not None and running is not world.loop:
                return None
            return None if _threads_since(world) else world
    return None


def _threads_since(world: SimWorld) -> bool:
    """Whether a thread started since ``world`` began is alive (or starting)."""
    before = _worlds[world]
    return any(thread not in before for thread in threading.enumerate())


def _deadline(world: SimWorld, timeout: float | None) -> float:
    return math.inf if timeout is None else world.loop.time() + timeout


def _run_until(world: SimWorld, done: asyncio.Future[Any], timeout: float | None) -> None:
    """Run ``world`` until ``done`` or ``timeout`` virtual seconds have passed."""
    loop = world.loop
    if asyncio._get_running_loop() is loop:
        loop.run_nested(done, world.held_while_blocked(), timeout)
        return
    with contextlib.suppress(TimeoutError):
        block_on(loop, done, timeout)


def wait_until(world: SimWorld, condition: Callable[[], bool], timeout: float | None) -> bool:
    """Run ``world`` until ``condition()`` holds, for at most ``timeout`` virtual seconds."""
    if condition():
        return True
    if timeout is not None and timeout <= 0:
        return False
    done = world.loop.watch(condition)
    try:
        _run_until(world, done, timeout)
    finally:
        done.cancel()
    return condition()


def _virtual_condition_wait(self: threading.Condition, timeout: float | None = None) -> bool:
    """``Condition.wait`` with the blocking step replaced by running the world.

    The protocol is the standard one: a waiter lock that ``notify`` releases.
    """
    world = _world_here()
    if world is None:
        return _condition_wait(self, timeout)
    if not self._is_owned():  # type: ignore[attr-defined]
        raise RuntimeError("cannot wait on un-acquired lock")
    waiter = _thread.allocate_lock()
    waiter.acquire()
    self._waiters.append(waiter)  # type: ignore[attr-defined]
    saved = self._release_save()  # type: ignore[attr-defined]
    try:
        return wait_until(world, lambda: not waiter.locked(), timeout)
    finally:
        self._acquire_restore(saved)  # type: ignore[attr-defined]
        if waiter.locked():
            with contextlib.suppress(ValueError):
                self._waiters.remove(waiter)  # type: ignore[attr-defined]


def _virtual_condition_wait_for(
    self: threading.Condition, predicate: Callable[[], Any], timeout: float | None = None
) -> Any:
    """``Condition.wait_for`` with its timeout counted in virtual time, not on the real clock."""
    world = _world_here()
    if world is None:
        return _condition_wait_for(self, predicate, timeout)
    deadline = _deadline(world, timeout)
    result = predicate()
    while not result:
        remaining = deadline - world.loop.time()
        if remaining <= 0:
            break
        self.wait(None if remaining == math.inf else remaining)
        result = predicate()
    return result


def _check_timeout(timeout: float | None) -> None:
    if timeout is not None and timeout < 0:
        raise ValueError("'timeout' must be a non-negative number")


def _virtual_queue_get(
    self: queue.Queue[Any], block: bool = True, timeout: float | None = None
) -> Any:
    """``Queue.get`` with its timeout counted in virtual time."""
    if not block or _world_here() is None:
        return _queue_get(self, block, timeout)
    _check_timeout(timeout)
    with self.not_empty:
        if not self.not_empty.wait_for(self._qsize, timeout):  # type: ignore[attr-defined]
            raise queue.Empty
    return _queue_get(self, False)


def _virtual_queue_put(
    self: queue.Queue[Any], item: Any, block: bool = True, timeout: float | None = None
) -> None:
    """``Queue.put`` with its timeout counted in virtual time."""
    if not block or self.maxsize <= 0 or _world_here() is None:
        _queue_put(self, item, block, timeout)
        return
    _check_timeout(timeout)
    with self.not_full:
        if not self.not_full.wait_for(lambda: self._qsize() < self.maxsize, timeout):
            raise queue.Full
    _queue_put(self, item, False)


def _virtual_sleep(seconds: float) -> None:
    """``time.sleep`` in virtual time: the world runs for ``seconds`` simulated seconds."""
    world = _world_here()
    if world is None or not isinstance(seconds, (int, float)) or not seconds > 0:
        _sleep(seconds)
        return
    _run_until(world, world.loop.create_future(), seconds)
