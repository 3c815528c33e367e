"""A fake clock with timers that fire when a test advances it, for code that schedules its
work on an I/O loop's ``call_soon`` and ``call_later``."""

from __future__ import annotations

from collections.abc import Callable


class Timers:
    """A fake clock with timers that fire when the test advances it."""

    def __init__(self) -> None:
        self.now = 0.0
        self.pending: list[tuple[float, Callable[[], None]]] = []

    def call_soon(self, fn: Callable[..., None], *args: object) -> None:
        fn(*args)

    def call_later(self, delay: float, fn: Callable[[], None]) -> None:
        self.pending.append((self.now + delay, fn))

    def advance(self, seconds: float) -> None:
        self.now += seconds
        due = [fn for at, fn in self.pending if at <= self.now]
        self.pending = [(at, fn) for at, fn in self.pending if at > self.now]
        for fn in due:
            fn()
