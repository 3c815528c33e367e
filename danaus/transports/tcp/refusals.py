"""Refused connections, logged at most once per peer address per interval (a flood makes one line).

Both real transports refuse strangers: tcp when a ZeroMQ handshake or a data
connection's challenge fails, ucx when a UCX connection does. The first
refusal from an address is logged at once; later ones within ``interval``
seconds are counted, and a timer logs the count when the interval ends, with
the last reason, whether or not another refusal comes: a refusal that follows
a flood is never left unsaid. The next interval starts then. Addresses are
forgotten oldest first beyond ``capacity`` (their count logged first), so many
addresses cannot grow the table.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger("danaus.security")

INTERVAL = 60.0
CAPACITY = 1024
UNKNOWN = "an unknown address"

Schedule = Callable[[float, Callable[[], None]], None]
"""Runs a function after a delay in seconds (thread-safe): an I/O thread's timers."""


@dataclass
class _Address:
    logged: float
    """When this address's last line was logged."""
    quiet: int = 0
    """Refusals since, not logged yet."""
    where: str = ""
    reason: str = ""
    """Who refused the last of them, and why."""


class RefusalLog:
    """Rate-limited warnings about refused connections. Thread-safe."""

    def __init__(
        self,
        schedule: Schedule,
        interval: float = INTERVAL,
        capacity: int = CAPACITY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._schedule = schedule
        self._interval = interval
        self._capacity = capacity
        self._clock = clock
        self._seen: OrderedDict[str, _Address] = OrderedDict()
        self._lock = threading.Lock()

    def refused(self, where: str, address: str | None, reason: str) -> None:
        """``where`` (a proc, a plane) refused a connection from ``address`` because ``reason``."""
        key = address or UNKNOWN
        now = self._clock()
        forgotten = []
        with self._lock:
            seen = self._seen.pop(key, None)
            if seen is not None and now - seen.logged < self._interval:
                if not seen.quiet:
                    self._schedule(seen.logged + self._interval - now, lambda: self._flush(key))
                seen.quiet, seen.where, seen.reason = seen.quiet + 1, where, reason
                self._seen[key] = seen
                return
            self._seen[key] = _Address(logged=now)
            while len(self._seen) > self._capacity:
                forgotten.append(self._seen.popitem(last=False))
        log.warning("%s refused a connection from %s: %s", where, key, reason)
        for old, entry in forgotten:
            self._log_quiet(old, entry, now)

    def _flush(self, key: str) -> None:
        """The interval of ``key``'s last line is over: log what it counted since."""
        now = self._clock()
        with self._lock:
            seen = self._seen.get(key)
            if seen is None or not seen.quiet:
                return
            self._seen[key] = _Address(logged=now)
        self._log_quiet(key, seen, now)

    def _log_quiet(self, key: str, seen: _Address, now: float) -> None:
        if seen.quiet:
            log.warning(
                "%s refused %d more connections from %s in the last %.0f s (the last: %s)",
                seen.where,
                seen.quiet,
                key,
                now - seen.logged,
                seen.reason,
            )
