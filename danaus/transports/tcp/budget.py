"""How many more procs a host may start: the job's limit per host, and what its memory holds.

A host runs at most ``max_procs_per_host`` procs of a job at once, counting
every proc its launcher started that has not ended, whichever request started
it. And a request starts procs only if the host's available memory (psutil's
``available``: free memory and what the kernel can reclaim at once) holds an
idle proc's cost for each of them, beyond the procs still starting, whose
memory is not yet taken. A request that does not fit is refused whole, before
any of its procs starts, with an error that says how many would fit.

An idle proc's cost, `IDLE_PROC_BYTES`, is what ``benchmarks/proc_memory.py``
measured of idle procs forked from the fork server (the default way procs
start), each running one actor: 15 MiB of memory of their own (USS), 17 MiB
with their share of what they share with the fork server and each other
(PSS), rounded up. A proc started as a new interpreter (a `BootstrapCommand`)
takes more, about 28 MiB, and what the actors build comes on top: so this
bounds from below, stopping a request that could not even start, not one
whose procs later grow.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

MiB = 1024 * 1024
IDLE_PROC_BYTES = 18 * MiB
"""The memory an idle proc takes (PSS, measured: see the module's docstring)."""


class ProcBudgetError(RuntimeError):
    """A request for more procs than the host may run; the message says how many fit."""


def available_memory() -> int:
    """Bytes of memory the host can give new processes without swapping."""
    # Imported at a launcher's first request, which most procs never make: imported with the
    # module, psutil took about 5 ms of CPU of every worker's (and fork server's) start.
    import psutil

    return int(psutil.virtual_memory().available)


class ProcBudget:
    """The procs one launcher runs, and whether more fit. Thread-safe."""

    def __init__(
        self,
        host: str,
        limit: int,
        available: Callable[[], int] = available_memory,
        proc_bytes: int = IDLE_PROC_BYTES,
    ) -> None:
        self._host = host
        self._limit = limit
        self._available = available
        self._proc_bytes = proc_bytes
        self._live: set[str] = set()
        """Procs admitted that have not ended."""
        self._starting: set[str] = set()
        """Procs admitted that are not up yet (their memory is not taken yet)."""
        self._lock = threading.Lock()

    def admit(self, procs: Iterable[str]) -> None:
        """Count ``procs`` as running, or raise `ProcBudgetError` if they do not all fit."""
        procs = list(procs)
        with self._lock:
            by_limit = max(0, self._limit - len(self._live))
            free = self._available() - len(self._starting) * self._proc_bytes
            by_memory = max(0, free // self._proc_bytes)
            if len(procs) > min(by_limit, by_memory):
                raise ProcBudgetError(self._refusal(len(procs), by_limit, by_memory, free))
            self._live.update(procs)
            self._starting.update(procs)

    def started(self, proc: str) -> None:
        """``proc`` is up, or failed to start: its memory is now the host's to count."""
        with self._lock:
            self._starting.discard(proc)

    def ended(self, proc: str) -> None:
        with self._lock:
            self._live.discard(proc)
            self._starting.discard(proc)

    def _refusal(self, asked: int, by_limit: int, by_memory: int, free: int) -> str:
        fit = min(by_limit, by_memory)
        reasons = []
        if by_limit < asked:
            reasons.append(
                f"this job runs {len(self._live)} procs there and may run "
                f"{self._limit} per host (max_procs_per_host)"
            )
        if by_memory < asked:
            reasons.append(
                f"its available memory ({max(0, free) / MiB:,.0f} MiB, besides procs still "
                f"starting) holds {by_memory} more idle procs of about "
                f"{self._proc_bytes / MiB:.0f} MiB each"
            )
        why = "; and ".join(reasons)
        return f"host {self._host} has room for {fit} more procs, not {asked}: {why}"
