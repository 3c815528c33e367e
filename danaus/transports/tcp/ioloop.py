"""The I/O thread: where a real proc's sockets, heartbeats and child processes are served.

It is a small poll loop over ZeroMQ sockets and plain file descriptors, with
timers and a thread-safe ``call_soon``. User code never runs here, so a busy
or blocked endpoint cannot delay heartbeats, failure notices or transfers.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
import os
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any

import zmq

log = logging.getLogger("danaus.io")

STALL = 0.1
"""Seconds a poll may come back late before this thread takes it for a stall of its own."""

Handler = Callable[[], None]
Settle = Callable[[BaseException | None], None]
"""Ends an operation: with None when it succeeded, else with its error."""


class IoLoop:
    """A poll loop running on a daemon thread of its own."""

    def __init__(self, name: str) -> None:
        self._poller = zmq.Poller()
        self._handlers: dict[Any, Handler] = {}
        self._calls: deque[tuple[Callable[..., Any], tuple[Any, ...]]] = deque()
        self._timers: list[tuple[float, int, Callable[[], Any]]] = []
        self._timer_ids = itertools.count()
        self._wake_fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        # Closed with this object, never before: a thread may still call_soon after
        # the loop has stopped, and a closed number may already name another file.
        # Not at the interpreter's exit: the loop's thread (a daemon) may still poll
        # it then, and the process's end closes it anyway.
        weakref.finalize(self, os.close, self._wake_fd).atexit = False
        self._woken = False
        self._poller.register(self._wake_fd, zmq.POLLIN)
        self._running = True
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def in_thread(self) -> bool:
        return threading.get_ident() == self._thread.ident

    def add_reader(self, source: Any, handler: Handler) -> None:
        """Call ``handler`` whenever ``source`` (a zmq socket or an fd) is readable."""
        self._handlers[source] = handler
        self._poller.register(source, zmq.POLLIN)

    def remove_reader(self, source: Any) -> None:
        if self._handlers.pop(source, None) is not None:
            self._poller.unregister(source)

    def call_soon(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` on the I/O thread, in call order. Thread-safe."""
        self._calls.append((fn, args))
        if not self._woken:
            self._woken = True
            os.eventfd_write(self._wake_fd, 1)

    def call_later(self, delay: float, fn: Callable[[], Any]) -> None:
        """Run ``fn()`` after ``delay`` seconds. Call from the I/O thread only."""
        heapq.heappush(self._timers, (time.monotonic() + delay, next(self._timer_ids), fn))

    def call_later_threadsafe(self, delay: float, fn: Callable[[], Any]) -> None:
        """Run ``fn()`` after ``delay`` seconds. Thread-safe."""
        self.call_soon(self.call_later, delay, fn)

    def stop(self, timeout: float = 2.0) -> None:
        def halt() -> None:
            self._running = False

        self.call_soon(halt)
        if not self.in_thread() and self._thread.is_alive():
            self._thread.join(timeout)

    def _run(self) -> None:
        while self._running:
            timeout = None
            if self._calls:
                timeout = 0
            elif self._timers:
                timeout = max(0.0, self._timers[0][0] - time.monotonic()) * 1000
            try:
                ready = self._poll(timeout)
            except zmq.ZMQError as exc:
                if exc.errno == zmq.ETERM:
                    return
                raise
            for source, _ in ready:
                if source == self._wake_fd:
                    # Drain first, then reset: a call_soon that lands in between
                    # writes again, so its wake-up is never swallowed.
                    with contextlib.suppress(BlockingIOError):
                        os.eventfd_read(self._wake_fd)
                    self._woken = False
                    continue
                handler = self._handlers.get(source)
                if handler is not None:
                    self._guard(handler)
            self._run_calls()
            self._run_timers()

    def _poll(self, timeout: float | None) -> list[tuple[Any, int]]:
        """What is ready, polled for at most ``timeout`` ms.

        A poll that returns takes the interpreter's lock back, and another thread
        may hold it for seconds (a long call into C, a large import): what arrives
        meanwhile is not in the answer, and a timer run after it would find, say,
        heartbeats missing that are only unread. So after a poll that came back
        late, this thread looks again before it runs anything.
        """
        start = time.monotonic()
        ready = self._poller.poll(timeout)
        if timeout is not None and time.monotonic() - start > timeout / 1000 + STALL:
            ready = self._poller.poll(0)
        return ready

    def _run_calls(self) -> None:
        for _ in range(len(self._calls)):
            fn, args = self._calls.popleft()
            self._guard(fn, *args)

    def _run_timers(self) -> None:
        now = time.monotonic()
        while self._timers and self._timers[0][0] <= now:
            _, _, fn = heapq.heappop(self._timers)
            self._guard(fn)

    @staticmethod
    def _guard(fn: Callable[..., Any], *args: Any) -> None:
        try:
            fn(*args)
        except Exception:
            log.exception("error on the I/O thread in %r", fn)


def settler(loop: asyncio.AbstractEventLoop, future: asyncio.Future[None]) -> Settle:
    """A thread-safe, settle-once callback for ``future`` of ``loop``: for the I/O thread."""

    def settle(error: BaseException | None) -> None:
        def apply() -> None:
            if future.done():
                return
            if error is None:
                future.set_result(None)
            else:
                future.set_exception(error)

        if not loop.is_closed():
            loop.call_soon_threadsafe(apply)

    return settle
