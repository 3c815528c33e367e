"""Where actor code runs, and how sync code blocks on a future.

Each actor's code runs on one thread (`ActorThread` on real transports), or,
on the simulator, on the one loop of the world, with sync code in greenlets
(`GreenletRunner`). Sync endpoints and sync controller code call
``future.get()``; where that code runs decides how it waits:

* in a greenlet started by `GreenletRunner` (the simulator: one thread, virtual
  time), ``get`` switches back to the event loop's task, which awaits the
  future and switches back with its result;
* on a thread other than the runtime loop's (real transports: an actor's
  thread, or the controller's main thread), it waits on the loop from outside;
* on the loop's own thread while the loop is idle (the simulator's controller
  code), it runs the loop until the future is done.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
from collections.abc import Callable
from typing import Any

import greenlet

from danaus.core import awake, home_cpu
from danaus.core.actor_loop import ActorLoop
from danaus.core.transport import ActorRunner

_WAIT = "wait"
_DONE = "done"
"""What an `_EndpointGreenlet` tells its driver when it switches back: it waits on a
future (``[_WAIT, future, timeout]``), or its call is done (``[_DONE, returned, value]``:
``returned`` false when ``value`` is the exception the call raised)."""

_IDLE_GREENLETS = 64
"""How many finished greenlets a `GreenletRunner` keeps for later calls."""


class _EndpointGreenlet(greenlet.greenlet):
    """A greenlet running sync actor code for a `GreenletRunner`, one call after another.

    Sync code sees no running event loop, as on a thread of its own: the loop
    is marked running only while the greenlet has switched back to it. A
    finished call leaves the greenlet ready for the next one, as starting a
    greenlet costs several times what switching to one does. The calls and
    their outcomes go through the switches themselves: attributes of a
    greenlet cost several dictionary look-ups each to set and read.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(self._serve)
        self.loop = loop

    def _serve(self, fn: Callable[[], Any]) -> None:
        loop = self.loop
        while True:
            # Sync code sees no running loop, as it would on a thread of its own (asyncio.run
            # in a sync endpoint works); the loop's task gets it back when the code returns.
            asyncio._set_running_loop(None)
            try:
                ended = [_DONE, True, fn()]
            except greenlet.GreenletExit:
                raise
            except BaseException as exc:
                ended = [_DONE, False, exc]
            finally:
                asyncio._set_running_loop(loop)
            del fn  # kept no longer than the call: its arguments may be large
            # The driver empties ``ended`` once read: an idle greenlet keeps no result alive.
            fn = self.parent.switch(ended)

    def wait(self, afut: asyncio.Future[Any], timeout: float | None) -> Any:
        """Have the loop's task await ``afut``; return its result here."""
        asyncio._set_running_loop(self.loop)
        try:
            return self.parent.switch([_WAIT, afut, timeout])
        finally:
            asyncio._set_running_loop(None)


def _timed_out(timeout: float | None) -> TimeoutError:
    return TimeoutError(f"no result within {timeout} s")


async def _wait(afut: asyncio.Future[Any], timeout: float | None) -> Any:
    try:
        return await asyncio.wait_for(asyncio.shield(afut), timeout)
    except asyncio.TimeoutError:
        if afut.done():
            return afut.result()
        raise _timed_out(timeout) from None


def _wait_from_thread(
    loop: asyncio.AbstractEventLoop, afut: asyncio.Future[Any], timeout: float | None
) -> Any:
    """Wait on another thread's loop: one callback there, an event here."""
    done = threading.Event()
    loop.call_soon_threadsafe(afut.add_done_callback, lambda _: done.set())
    if not done.wait(timeout):
        raise _timed_out(timeout)
    return afut.result()


class ThreadWaitable(asyncio.Future):  # type: ignore[type-arg]
    """An asyncio future that other threads can wait on: settling it wakes them at once.

    A thread waits without asking the loop for anything, and the loop wakes it
    in the very call that settles the future, not a pass later. Another loop's
    code waits the same way (`when_done`): what it gives runs in the settling
    call, so that awaiting costs no trip through this future's loop.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(loop=loop)
        self._sleepers_lock = threading.Lock()
        self._sleepers: list[threading.Lock] = []
        self._watchers: list[Callable[[asyncio.Future[Any]], None]] = []

    def set_result(self, result: Any) -> None:
        super().set_result(result)
        self._wake()

    def set_exception(self, exception: Any) -> None:
        super().set_exception(exception)
        self._wake()

    def cancel(self, msg: Any = None) -> bool:
        cancelled = super().cancel(msg)
        self._wake()
        return cancelled

    def _wake(self) -> None:
        with self._sleepers_lock:
            sleepers, self._sleepers = self._sleepers, []
            watchers, self._watchers = self._watchers, []
        for sleeper in sleepers:
            sleeper.release()
        for watcher in watchers:
            watcher(self)

    def when_done(self, watcher: Callable[[asyncio.Future[Any]], None]) -> bool:
        """Have ``watcher(self)`` called, from the settling thread, once this is done (from any
        thread); False if it is done already (the caller reads the outcome itself)."""
        with self._sleepers_lock:
            if self.done():
                return False
            self._watchers.append(watcher)
        return True

    def wait_from_thread(self, timeout: float | None) -> Any:
        """The result, waited for from a thread other than the loop's."""
        sleeper = threading.Lock()
        sleeper.acquire()
        with self._sleepers_lock:
            if self.done():
                return self.result()
            self._sleepers.append(sleeper)
        acquire = awake.waits_of(self.get_loop()).acquire
        if not home_cpu.wait_at_home(acquire, sleeper, -1 if timeout is None else timeout):
            with self._sleepers_lock:
                if sleeper in self._sleepers:
                    self._sleepers.remove(sleeper)
            if not self.done():
                raise _timed_out(timeout)
        return self.result()


async def cancel_leftover_tasks() -> None:
    """Cancel every other task of the running loop and wait for them (the end of a shutdown)."""
    leftover = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in leftover:
        task.cancel()
    await asyncio.gather(*leftover, return_exceptions=True)


def discard_outcome(afut: asyncio.Future[Any]) -> None:
    """A done-callback for a future whose error, if unread, is reported another way."""
    if not afut.cancelled():
        afut.exception()


def block_on(
    loop: asyncio.AbstractEventLoop, afut: asyncio.Future[Any], timeout: float | None
) -> Any:
    """Wait for ``afut`` (a future of ``loop``) from sync code; see the module docstring."""
    current = greenlet.getcurrent()
    if isinstance(current, _EndpointGreenlet):
        return current.wait(afut, timeout)
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        raise RuntimeError(
            "Future.get() would block the event loop it waits on; use `await future` in async code"
        )
    if loop.is_running():
        if isinstance(afut, ThreadWaitable):
            return afut.wait_from_thread(timeout)
        return _wait_from_thread(loop, afut, timeout)
    waiting = loop.create_task(_wait(afut, timeout))
    try:
        return loop.run_until_complete(waiting)
    except BaseException:
        # The loop gave up (a stall): the caller has its error; the answer, if it
        # ever comes, is not wanted, and an error in it is not worth a warning.
        waiting.cancel()
        afut.add_done_callback(discard_outcome)
        raise


class GreenletRunner(ActorRunner):
    """Runs sync actor code in greenlets on the loop's own thread (deterministic, no threads).

    Every actor of a world shares it: their messages are all handled on one loop.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._idle: list[_EndpointGreenlet] = []

    async def call_sync(self, fn: Callable[[], Any]) -> Any:
        child = self._idle.pop() if self._idle else _EndpointGreenlet(self.loop)
        child.parent = greenlet.getcurrent()
        child.gr_context = contextvars.copy_context()
        request = child.switch(fn)
        del fn
        while request[0] is _WAIT:
            _, afut, timeout = request
            try:
                value = await _wait(afut, timeout)
            except BaseException as exc:
                request = child.throw(exc)
            else:
                request = child.switch(value)
        if len(self._idle) < _IDLE_GREENLETS:
            self._idle.append(child)
        _, returned, value = request
        request.clear()
        if returned:
            return value
        raise value


class ActorThread(ActorRunner):
    """One actor's own thread, with an event loop of its own (real transports).

    Everything the actor runs happens here: ``__init__``, sync and async
    endpoints, hooks. A sync endpoint blocks the thread while it runs and sees
    no running event loop, as code in a plain thread would; a blocking
    ``get()`` in it waits for the runtime's loop, on another thread. Its waits
    poll first as its proc's ``waits`` say (`danaus.core.awake`).
    """

    def __init__(self, name: str, waits: awake.Waits) -> None:
        self.loop = ActorLoop(waits)
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        home_cpu.free_thread()
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
            self.loop.shut()
            # The work handed over before the loop shut runs first: it was queued first.
            self.loop.run_until_complete(cancel_leftover_tasks())
        finally:
            self.loop.close()

    async def call_sync(self, fn: Callable[[], Any]) -> Any:
        # The sync endpoint runs on this thread, inside the loop's task: it must see no
        # running loop (as in a thread of its own), or asyncio.run in it would refuse.
        asyncio._set_running_loop(None)
        try:
            return contextvars.copy_context().run(fn)
        finally:
            asyncio._set_running_loop(self.loop)

    def close(self) -> None:
        """Let the thread end once what is queued for it has run (from any thread)."""
        with contextlib.suppress(RuntimeError):  # already closed
            self.loop.call_soon_threadsafe(self.loop.stop)
