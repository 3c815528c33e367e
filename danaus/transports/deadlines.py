"""Deadlines that count only the time this proc could act: a stall of its own is not the peer's.

A handshake under a deadline is a bound on what a stranger can hold of a
proc. But on a host with more busy threads than CPUs, or while another thread
of the proc holds the interpreter's lock for seconds (a long call into C, the
import of a large library), the proc's loop itself may not run for a while;
the peer's answer then sits unread, and a plain deadline blames the peer for
the wait. `within` counts the time the loop was awake: a tick at a time, each
counted as at most `MAX_TICK` however late it ran.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")

TICK = 0.1
"""Seconds between two looks at the clock while waiting."""
MAX_TICK = 2 * TICK
"""What one look counts for at most: the rest of a late tick was the loop's own stall."""


async def within(awaitable: Awaitable[T], seconds: float) -> T:
    """``await awaitable``, cancelled once this loop has been awake for ``seconds`` while it
    waited (`asyncio.TimeoutError` then), as `asyncio.wait_for` would after ``seconds``."""
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(awaitable)
    left = seconds
    last = loop.time()
    try:
        while True:
            done, _ = await asyncio.wait((task,), timeout=min(TICK, max(left, 0.0)))
            if done:
                return task.result()
            now = loop.time()
            left -= min(now - last, MAX_TICK)
            last = now
            if left <= 0:
                break
    finally:
        task.cancel()  # nothing if it is done; if the wait itself is cancelled, it goes too
    await asyncio.wait((task,))
    if not task.cancelled():
        return task.result()
    raise asyncio.TimeoutError
