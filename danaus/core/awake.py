"""Waiting awake: a proc's threads poll a while for what they expect before they sleep.

Messages between procs arrive as wake-ups: the sender's system call wakes the
receiver's thread, asleep in ``epoll`` or on a lock. When that thread's CPU
had nothing else to run, the CPU went idle too, and waking an idle CPU costs
far more than the message: an interrupt between CPUs and, in a virtual machine
whose idle vCPUs halt, an exit to the hypervisor and a reschedule of the vCPU
on the host. A thread that polls keeps its CPU running, and finds the message
at once.

So a proc's waits poll first, for `Waits.spin` seconds at most (the job's
``wait_spin_us``): its runtime loop's thread after a pass that handled I/O
(`AwakeSelector`), the actor's thread between messages, a caller blocked in
``get()``. Each proc's world has one `Waits`, and hands it to what waits: its
runtime loop (an `AwakeLoop`, which futures of the loop find it through), and
its actors' threads. Between polls the thread yields its CPU
(``sched_yield``), so that any thread ready to run there, such as the one the
poll waits for, runs at once: on a host with more busy threads than CPUs,
polling takes only what nobody else wants. Then the thread sleeps: a proc
with nothing to do polls once, for `spin` seconds, not until its next message.

Polling pays only while the host has a CPU to spare. A yield that comes back
after a moment ran a thread that had a short task, which is the hand-off polling
is for (the thread that reads the awaited message, on a host with as many busy
threads as CPUs). One that comes back late (after `CONTENDED` seconds, close to a
scheduler's time slice) ran someone else's computation: a busy thread of another
process on that CPU, or one of this proc's threads that computes. Every poll of
the proc's `Waits` then stops, and none starts for a while (`BACKOFF`, doubled
while it keeps happening, up to `MAX_BACKOFF`): on a host whose CPUs all
compute, a proc's waits sleep at once, as they would with no polling at all.
"""

from __future__ import annotations

import asyncio
import os
import selectors
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import TypeVar

T = TypeVar("T")

CONTENDED = 1e-3
"""Seconds after which a yield is taken to have run another thread's computation: a yield that
finds nothing else to run returns in a microsecond or two, one that hands the CPU to a thread
with a short task (reading a message) in tens of microseconds, while a thread that computes
keeps the CPU for a time slice of a few milliseconds."""
BACKOFF = 0.01
"""Seconds during which no wait polls, after a poll found the CPU wanted elsewhere."""
MAX_BACKOFF = 1.0
"""The longest pause in polling, reached while every poll keeps finding its CPU wanted."""


class Waits:
    """How the threads of one proc wait: polling for up to `spin` seconds, then asleep.

    Thread-safe: its threads share when polling pauses (a race between two of
    them at worst delays a pause, or lengthens one).
    """

    def __init__(self, spin_us: int) -> None:
        if spin_us < 0:
            raise ValueError(f"a spin cannot be negative, not {spin_us!r}")
        self.spin = spin_us / 1e6
        """How long a wait polls before it sleeps, in seconds; 0: it sleeps at once."""
        self._quiet_until = 0.0
        """Until when (``time.perf_counter``) no wait polls."""
        self._backoff = BACKOFF
        """The next pause in polling, should a poll find its CPU wanted again."""

    def acquire(self, lock: threading.Lock, timeout: float = -1) -> bool:
        """``lock.acquire(True, timeout)``, polled for up to the spin before it sleeps."""
        spin_for = self.spin if timeout < 0 else min(self.spin, timeout)
        if spin_for <= 0:
            return lock.acquire(True, timeout)
        start = time.perf_counter()
        if self.poll(partial(lock.acquire, False), spin_for):
            return True
        left = -1 if timeout < 0 else max(0.0, timeout - (time.perf_counter() - start))
        return lock.acquire(True, left)

    def poll(self, probe: Callable[[], T], seconds: float) -> T:
        """``probe()`` again and again, yielding the CPU between tries, until it returns
        something true or ``seconds`` have passed; its last result. Once only while polling
        pauses, and the last try if a yield finds the CPU wanted elsewhere (module docstring)."""
        now = time.perf_counter()
        if now < self._quiet_until:
            return probe()
        end = now + seconds
        while True:
            found = probe()
            if found:
                self._backoff = BACKOFF
                return found
            before = time.perf_counter()
            if before >= end:
                self._backoff = BACKOFF
                return found
            os.sched_yield()
            after = time.perf_counter()
            if after - before > CONTENDED:
                self._quiet_until = after + self._backoff
                self._backoff = min(2 * self._backoff, MAX_BACKOFF)
                return probe()


SLEEP = Waits(0)
"""Waits that sleep at once: those of threads whose futures belong to no proc's `AwakeLoop`
(it never polls, so it keeps no state that changes)."""


class AwakeSelector(selectors.DefaultSelector):  # type: ignore[misc,valid-type]
    """A selector that, after a select that found something, polls before it sleeps.

    A select that found nothing (a timer's wake-up, say) is not followed by
    polling: a proc that is idle sleeps.
    """

    def __init__(self, waits: Waits) -> None:
        super().__init__()
        self._waits = waits
        self._busy = False

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        spin_for = self._waits.spin if self._busy else 0.0
        if timeout is not None:
            spin_for = min(spin_for, timeout)
        if spin_for > 0:
            start = time.perf_counter()
            ready = self._waits.poll(partial(super().select, 0), spin_for)
            if ready:
                return ready
            if timeout is not None:
                timeout = max(0.0, timeout - (time.perf_counter() - start))
        ready = super().select(timeout)
        self._busy = bool(ready)
        return ready


class AwakeLoop(asyncio.SelectorEventLoop):
    """A proc's runtime loop: its selector polls as the proc's `waits` say, and threads that
    wait for its futures find the same `waits` here (`waits_of`)."""

    def __init__(self, waits: Waits) -> None:
        super().__init__(AwakeSelector(waits))
        self.waits = waits


def waits_of(loop: asyncio.AbstractEventLoop) -> Waits:
    """How a thread waiting for a future of ``loop`` waits: as the proc of that loop does, if
    ``loop`` is a proc's `AwakeLoop`; else asleep at once."""
    return loop.waits if isinstance(loop, AwakeLoop) else SLEEP
