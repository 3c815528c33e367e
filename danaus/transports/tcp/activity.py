"""Whether another process of the job runs, judged from the kernel's view of it.

A process whose threads are starved of the interpreter's lock (a long call
into C that holds it, a large import, a host with no CPU to spare) answers no
heartbeat meanwhile, yet runs; one that is paused, or wedged with every thread
asleep, uses no CPU. A launcher asks this of the procs it started before it
declares one lost, and a proc asks it of its controller, on its own host,
before it counts the controller's silence against it.
"""

from __future__ import annotations

import time
from typing import Literal

IDLE_WINDOW = 1.0
"""Seconds without a tick of CPU time after which a process that answers nothing is wedged."""


class ProcessActivity:
    """Watches one process's CPU time, to tell a busy process from a halted one."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._cpu_seen = -1.0
        """The CPU time the process had used when `state` last saw it grow (-1: never looked)."""
        self._cpu_seen_at = 0.0
        """When that was (``time.monotonic``)."""

    def state(self) -> Literal["runs", "halted"]:
        """``runs`` if the process exists, is not stopped, and has used CPU lately.

        The kernel counts CPU time in ticks of 10 ms, so a process is taken to
        use none only once it has gained no tick for `IDLE_WINDOW` seconds.
        """
        # Imported at the first question, which most processes never ask: imported with this
        # module, psutil took about 5 ms of CPU of every worker's (and fork server's) start.
        import psutil

        # Process states in which a process does not run (paused, or ended and not yet reaped).
        halted = (
            psutil.STATUS_STOPPED,
            psutil.STATUS_TRACING_STOP,
            psutil.STATUS_ZOMBIE,
            psutil.STATUS_DEAD,
        )
        try:
            process = psutil.Process(self.pid)
            with process.oneshot():
                status = process.status()
                times = process.cpu_times()
        except psutil.Error:
            return "halted"
        if status in halted:
            return "halted"
        used = times.user + times.system
        now = time.monotonic()
        if used > self._cpu_seen:
            self._cpu_seen, self._cpu_seen_at = used, now
            return "runs"
        return "halted" if now - self._cpu_seen_at >= IDLE_WINDOW else "runs"
