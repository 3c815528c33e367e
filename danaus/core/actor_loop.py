"""The event loop of an actor's own thread: woken through a lock while it watches no file.

Another thread hands an actor work with ``call_soon_threadsafe``, which wakes a
standard asyncio loop by writing to a pipe. Writing releases the writer's GIL
for the system call, so the actor's thread, woken at once, takes the GIL, and
the writer has to win it back before it can go on: two threads trading the GIL
for every message. An actor's loop usually watches no file at all (its work
arrives as callbacks), so while that is so it sleeps on a lock instead, and a
waker releases the lock without letting go of the GIL: the actor's thread runs
once the waker's thread next waits on its own. Once user code makes the loop
watch a file (a socket, a subprocess), it sleeps in epoll as usual.
"""

from __future__ import annotations

import asyncio
import selectors
import threading
from typing import Any

from danaus.core import awake, home_cpu


class _LockSelector(selectors.DefaultSelector):  # type: ignore[misc,valid-type]
    """A selector that, while only the loop's own wake-up pipe is registered, sleeps on a lock."""

    def __init__(self, waits: awake.Waits) -> None:
        super().__init__()
        self._waits = waits
        self._mutex = threading.Lock()
        self._bell = threading.Lock()
        """Held while nobody has rung; released by `ring` (lock mode only)."""
        self._bell.acquire()
        self._rung = False
        self._in_epoll = False

    def ring(self) -> bool:
        """Wake a sleep on the lock, now or the next one; False if the loop sleeps in epoll."""
        with self._mutex:
            if self._in_epoll:
                return False
            if not self._rung:
                self._rung = True
                self._bell.release()
        return True

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        with self._mutex:
            if self._rung:
                self._bell.acquire(blocking=False)
                self._rung = False
                return []
            self._in_epoll = len(self.get_map()) > 1
        # Only a wait that may sleep is taken at the proc's home CPU; a poll is not.
        sleeps = timeout is None or timeout > 0
        if self._in_epoll:
            try:
                if sleeps:
                    return home_cpu.wait_at_home(super().select, timeout)
                return super().select(timeout)
            finally:
                with self._mutex:
                    self._in_epoll = False
        if sleeps:
            wait = -1 if timeout is None else timeout
            rung = home_cpu.wait_at_home(self._waits.acquire, self._bell, wait)
        else:
            rung = self._bell.acquire(False)
        with self._mutex:
            if self._rung and not rung:
                self._bell.acquire(blocking=False)
            self._rung = False
        return []


class ActorLoop(asyncio.SelectorEventLoop):
    """An asyncio loop for an actor's thread (see the module docstring), whose sleeps on the
    lock poll first as its proc's ``waits`` say (`danaus.core.awake`).

    Its end has two steps, so that no work handed to it is lost: `shut` (from
    then on `call_soon_threadsafe` raises `RuntimeError`, as on a closed loop,
    and the caller runs the work itself), then running what it took before,
    then ``close``. A plain loop drops, without a word, what another thread
    handed it after it last ran and before it closed.
    """

    def __init__(self, waits: awake.Waits) -> None:
        self._bell_selector = _LockSelector(waits)
        self._door = threading.Lock()
        self._shut = False
        super().__init__(self._bell_selector)

    def call_soon_threadsafe(self, callback: Any, *args: Any, context: Any = None) -> Any:
        with self._door:
            if self._shut:
                raise RuntimeError("this actor's loop takes no more work")
            return super().call_soon_threadsafe(callback, *args, context=context)

    def shut(self) -> None:
        """Take no more work from other threads; what they handed over before still runs."""
        with self._door:
            self._shut = True

    def _write_to_self(self) -> Any:
        if not self._bell_selector.ring():
            super()._write_to_self()
