"""The order of calls between two procs, whatever path each took.

A call travels straight to its proc, or along a cast's tree through other
procs (`danaus.core.casting`), so two calls from one proc to another may
arrive in either order, and a call resent after a forwarding proc was lost
may arrive twice. So every call carries its number in the sequence from its
sender's proc to its receiver's proc (`Outbound`), and the receiver hands
calls on in that order, each once, holding any that arrive early (`Inbound`).
Order between procs implies order between any two of their actors.

The state is one counter per peer proc on each side, and the calls held
early; a peer's state goes when the peer is lost.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


class Outbound:
    """Numbers the calls this proc sends, per receiving proc (thread-safe)."""

    __slots__ = ("_counters",)

    def __init__(self) -> None:
        self._counters: dict[str, Iterator[int]] = {}

    def next(self, proc: str) -> int:
        """The number of the next call to ``proc`` (0, 1, 2...)."""
        counter = self._counters.get(proc)
        if counter is None:
            # setdefault and next() on a count are atomic: two threads never share a number.
            counter = self._counters.setdefault(proc, itertools.count())
        return next(counter)

    def forget(self, proc: str) -> None:
        """``proc`` is lost: nothing more will be sent to it."""
        self._counters.pop(proc, None)


class _Stream(Generic[T]):
    __slots__ = ("expected", "held")

    def __init__(self) -> None:
        self.expected = 0
        self.held: dict[int, T | None] | None = None
        """The calls that came early, by number; None while there are none, as is almost
        always so: a call in order then reads no dictionary (at thousands of procs, one
        more object out of the CPU's caches for each)."""


class Inbound(Generic[T]):
    """Hands on calls from each sending proc in the order they were numbered, each once.

    Used on the runtime's loop thread only.
    """

    __slots__ = ("_streams",)

    def __init__(self) -> None:
        self._streams: dict[str, _Stream[T]] = {}

    def take(self, origin: str, seq: int, item: T | None) -> list[T] | None:
        """Call ``seq`` from proc ``origin`` arrived: the items now due, in order.

        An empty list: it came early and is held until the calls before it
        arrive. None: it was handed on before (a duplicate, dropped). An item of
        None fills its place without being handed on (a call that was refused).
        """
        stream = self._streams.get(origin)
        if stream is None:
            stream = self._streams[origin] = _Stream()
        expected = stream.expected
        held = stream.held
        if seq == expected and held is None:
            stream.expected = expected + 1
            return [item] if item is not None else []
        if seq < expected or (held is not None and seq in held):
            return None
        if held is None:
            held = stream.held = {}
        held[seq] = item
        due: list[T] = []
        while stream.expected in held:
            found = held.pop(stream.expected)
            stream.expected += 1
            if found is not None:
                due.append(found)
        if not held:
            stream.held = None
        return due

    def holding(self, origin: str) -> bool:
        """Whether calls from ``origin`` wait for earlier ones."""
        stream = self._streams.get(origin)
        return stream is not None and stream.held is not None

    def forget(self, origin: str) -> int:
        """``origin`` is lost: drop its state; how many held calls were dropped with it."""
        stream = self._streams.pop(origin, None)
        return len(stream.held) if stream is not None and stream.held is not None else 0
