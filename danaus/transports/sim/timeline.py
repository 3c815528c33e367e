"""The simulation's clock and its queue of events: the one owner of both.

Everything that happens on the simulated cluster apart from the asyncio side
(messages arriving, faults taking effect after a delay) is an event at a
virtual time, kept on one heap here and processed in the order of its
``(time, id)`` key: by time, and among events due together, in the order they
were scheduled. Nothing else reads or writes the heap, or sets the clock.

The network's messages come through `Lane`\\ s. A queue of the network passes
on what it served mostly in the order of arrival, so each lane keeps its
events in a deque and puts only the first on the heap: the heap then holds a
few entries per host instead of every message in flight (a broadcast to
10,000 procs has 10,000 replies in flight), and pushing and popping cost with
its size. Since every key is distinct, an event that waits in its lane until
the one before it is processed comes off the heap exactly when it would have
without the lane.

This was SimPy's ``Environment``, of which the simulator used only the heap,
``step`` and ``timeout``; owning them lets an event be a plain tuple that
names its handler, processed without a SimPy event object, its callback list
and a call of ``step`` per event (see ``docs/simulator.md``).
"""

from __future__ import annotations

import itertools
import math
from collections import deque
from collections.abc import Callable, Mapping, Sized
from heapq import heappop, heappush, heapreplace
from typing import Any

Handler = Callable[[Any], None]
"""What processes an event: called with the event's argument."""

Entry = tuple[float, int, "Lane | None", Handler, Any]
"""An event on the heap: its time, its id, the lane it came through (None: none), its
handler and the handler's argument."""


class Lane:
    """Events of non-decreasing times, of which only the first is on the heap.

    An event due earlier than the last one here goes on the heap directly.
    """

    __slots__ = ("last", "queued", "waiting")

    def __init__(self) -> None:
        self.queued = False
        """Whether an event of this lane is on the heap."""
        self.last = 0.0
        """The time of the latest event of this lane (while ``queued``)."""
        self.waiting: deque[Entry] = deque()


class Timeline:
    """The virtual clock, ``now``, and the heap of events due at or after it."""

    __slots__ = ("_heap", "_ids", "now")

    def __init__(self) -> None:
        self.now: float = 0
        """The virtual time, in seconds: the time of the event processed last, or where
        `move_to` put the clock. It starts as the int 0, not 0.0, so that the events a run
        records before its clock first moves read ``"t":0`` in its trace, as they always
        have: a trace's digest is that of its text."""
        self._heap: list[Entry] = []
        self._ids = itertools.count()

    def call_later(self, delay: float, handler: Handler, argument: Any = None) -> None:
        """Call ``handler(argument)`` ``delay`` seconds from now, after the events scheduled
        for that time before. An event at an infinite time never happens: it is dropped."""
        if delay != math.inf:
            heappush(self._heap, (self.now + delay, next(self._ids), None, handler, argument))

    def through(self, lane: Lane, when: float, handler: Handler, argument: Any) -> None:
        """Call ``handler(argument)`` at time ``when`` (not before now), through ``lane``."""
        # The key's time is ``now + delay``, as for `call_later`: a time computed that way
        # may differ from ``when`` in its last bit, and replays depend on every bit.
        now = self.now
        time = now + (when - now)
        if not lane.queued:
            lane.queued = True
            lane.last = time
            heappush(self._heap, (time, next(self._ids), lane, handler, argument))
        elif time >= lane.last:
            lane.last = time
            lane.waiting.append((time, next(self._ids), lane, handler, argument))
        else:
            heappush(self._heap, (time, next(self._ids), None, handler, argument))

    def next_time(self) -> float:
        """The time of the next event (infinity: none is left)."""
        return self._heap[0][0] if self._heap else math.inf

    def advance(
        self,
        deadline: float,
        ready: Sized,
        watches: Mapping[Any, Any],
        watch_holds: Callable[[], bool],
    ) -> bool:
        """Process the events due by ``deadline`` in order; stop early, returning True, once
        one has made ``ready`` non-empty or, while there are ``watches``, ``watch_holds()``.

        The event loop's own state is read here, rather than through a call per event,
        because a broadcast to thousands of procs is that many events in a row.
        """
        heap = self._heap
        while heap and heap[0][0] <= deadline:
            lane = heap[0][2]
            if lane is None:
                self.now, _, _, handler, argument = heappop(heap)
            elif lane.waiting:
                # The lane's next event takes the place of this one: one pass down the
                # heap rather than two (it is due later, so this one comes out).
                self.now, _, _, handler, argument = heapreplace(heap, lane.waiting.popleft())
            else:
                lane.queued = False
                self.now, _, _, handler, argument = heappop(heap)
            handler(argument)
            if ready or (watches and watch_holds()):
                return True
        return False

    def move_to(self, when: float) -> None:
        """Move the clock to ``when`` (as computed for `call_later`): no event is due before."""
        if self._heap and self._heap[0][0] < when:
            raise RuntimeError(f"events are due before {when}: the clock cannot skip them")
        now = self.now
        self.now = now + (when - now)
