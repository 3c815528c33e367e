"""Refused connections, logged once per peer address per interval (a flood makes one line).

Both real transports refuse strangers: tcp when a ZeroMQ handshake fails, ucx
when a challenge goes unanswered. The first refusal from an address is logged
at once; later ones within ``interval`` seconds are only counted, and the count
is logged with the next refusal after the interval. Addresses are forgotten
oldest first beyond ``capacity``, so many addresses cannot grow the table.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

log = logging.getLogger("danaus.security")

INTERVAL = 60.0
CAPACITY = 1024


class RefusalLog:
    """Rate-limited warnings about refused connections. Thread-safe."""

    def __init__(
        self,
        interval: float = INTERVAL,
        capacity: int = CAPACITY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._interval = interval
        self._capacity = capacity
        self._clock = clock
        self._seen: OrderedDict[str, tuple[float, int]] = OrderedDict()
        """Address -> (when its last line was logged, refusals since, not logged)."""
        self._lock = threading.Lock()

    def refused(self, where: str, address: str | None, reason: str) -> None:
        """``where`` (a proc, a plane) refused a connection from ``address`` because ``reason``."""
        key = address or "an unknown address"
        now = self._clock()
        with self._lock:
            logged, quiet = self._seen.pop(key, (-float("inf"), 0))
            if now - logged < self._interval:
                self._seen[key] = (logged, quiet + 1)
                return
            self._seen[key] = (now, 0)
            while len(self._seen) > self._capacity:
                self._seen.popitem(last=False)
        more = f" ({quiet} more from it in the last {self._interval:g} s)" if quiet else ""
        log.warning("%s refused a connection from %s: %s%s", where, key, reason, more)
