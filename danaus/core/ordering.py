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
from collections.abc import Iterable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


class Outbound:
    """Numbers the calls this proc sends, per receiving proc (thread-safe)."""

    __slots__ = ("_counters",)

    def __init__(self) -> None:
        self._counters: dict[str, Iterator[int]] = {}

    def numbers(self, procs: Iterable[str]) -> list[int]:
        """The numbers of the next calls to ``procs``, one each (0, 1, 2... per proc): a cast
        numbers all its targets in one pass."""
        counters = self._counters
        found = []
        for proc in procs:
            counter = counters.get(proc)
            if counter is None:
                # setdefault and next() on a count are atomic: two threads never share a number.
                counter = counters.setdefault(proc, itertools.count())
            found.append(next(counter))
        return found

    def forget(self, proc: str) -> None:
        """``proc`` is lost: nothing more will be sent to it."""
        self._counters.pop(proc, None)


class Inbound(Generic[T]):
    """Hands on calls from each sending proc in the order they were numbered, each once.

    Used on the runtime's loop thread only. The number expected next from each
    proc is an int in one dictionary, and the calls that came early are kept
    in another only while there are any, as is almost never so: a call in
    order reads no object of its own (at thousands of procs, each one more is
    one more miss of the CPU's caches).
    """

    __slots__ = ("_expected", "_held")

    def __init__(self) -> None:
        self._expected: dict[str, int] = {}
        self._held: dict[str, dict[int, T | None]] = {}
        """The calls that came early, by sending proc, then by number."""

    def take(self, origin: str, seq: int, item: T | None) -> list[T] | None:
        """Call ``seq`` from proc ``origin`` arrived: the items now due, in order.

        An empty list: it came early and is held until the calls before it
        arrive. None: it was handed on before (a duplicate, dropped). An item of
        None fills its place without being handed on (a call that was refused).
        """
        expected = self._expected.get(origin, 0)
        held = self._held.get(origin) if self._held else None
        if held is None:
            if seq == expected:
                self._expected[origin] = seq + 1
                return [item] if item is not None else []
            if seq < expected:
                return None
            held = self._held[origin] = {}
        elif seq < expected or seq in held:
            return None
        held[seq] = item
        due: list[T] = []
        while expected in held:
            found = held.pop(expected)
            expected += 1
            if found is not None:
                due.append(found)
        self._expected[origin] = expected
        if not held:
            del self._held[origin]
        return due

    def holding(self, origin: str) -> bool:
        """Whether calls from ``origin`` wait for earlier ones."""
        return origin in self._held

    def forget(self, origin: str) -> int:
        """``origin`` is lost: drop its state; how many held calls were dropped with it."""
        self._expected.pop(origin, None)
        held = self._held.pop(origin, None)
        return len(held) if held is not None else 0
