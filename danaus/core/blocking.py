"""Blocking from sync code without threads where threads are not allowed.

Sync endpoints and sync controller code call ``future.get()``. Where that code
runs decides how it waits:

* in a greenlet started by `GreenletRunner` (the simulator: one thread, virtual
  time), ``get`` switches back to the event loop's task, which awaits the
  future and switches back with its result;
* on a thread other than the loop's (real transports: sync endpoints run on a
  thread per actor, controller code on the main thread), it waits on the loop
  from outside;
* on the loop's own thread while the loop is idle (the simulator's controller
  code), it runs the loop until the future is done.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import greenlet

from danaus.core.transport import SyncRunner


class _EndpointGreenlet(greenlet.greenlet):
    """A greenlet running one sync endpoint call for a `GreenletRunner`."""


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


def _discard(afut: asyncio.Future[Any]) -> None:
    if not afut.cancelled():
        afut.exception()


def block_on(
    loop: asyncio.AbstractEventLoop, afut: asyncio.Future[Any], timeout: float | None
) -> Any:
    """Wait for ``afut`` (a future of ``loop``) from sync code; see the module docstring."""
    current = greenlet.getcurrent()
    if isinstance(current, _EndpointGreenlet):
        return current.parent.switch((afut, timeout))
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        raise RuntimeError(
            "Future.get() would block the event loop it waits on; use `await future` in async code"
        )
    if loop.is_running():
        return _wait_from_thread(loop, afut, timeout)
    waiting = loop.create_task(_wait(afut, timeout))
    try:
        return loop.run_until_complete(waiting)
    except BaseException:
        # The loop gave up (a stall): the caller has its error; the answer, if it
        # ever comes, is not wanted, and an error in it is not worth a warning.
        waiting.cancel()
        afut.add_done_callback(_discard)
        raise


class GreenletRunner(SyncRunner):
    """Runs sync endpoints in greenlets on the loop's thread (deterministic, no threads)."""

    async def _drive(self, fn: Callable[[], Any]) -> Any:
        child = _EndpointGreenlet(fn)
        child.gr_context = contextvars.copy_context()
        request = child.switch()
        while not child.dead:
            afut, timeout = request
            try:
                value = await _wait(afut, timeout)
            except BaseException as exc:
                request = child.throw(exc)
            else:
                request = child.switch(value)
        return request

    def run(self, fn: Callable[[], Any]) -> Awaitable[Any]:
        return self._drive(fn)


class ThreadRunner(SyncRunner):
    """Runs one actor's sync endpoints on a thread of its own, so they may block freely."""

    def __init__(self, name: str = "danaus-actor") -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)

    def run(self, fn: Callable[[], Any]) -> Awaitable[Any]:
        loop = asyncio.get_running_loop()
        return loop.run_in_executor(self._executor, contextvars.copy_context().run, fn)

    def close(self) -> None:
        self._executor.shutdown(wait=False)
