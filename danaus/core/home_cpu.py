"""A proc's home CPU: where its threads wait, so that a message handed between them
stays on one CPU.

On a real transport a message crosses threads inside a proc: the runtime loop's
thread reads it, then wakes the actor's thread (or, in the controller, the
caller blocked in ``get()``). Left to itself, the kernel wakes a thread on
whichever CPU is idle, which is rarely the waker's: the wake-up then costs an
interrupt between CPUs, and the woken thread finds none of the message's
memory in its CPU's caches. On a 2-vCPU virtual machine that is about a third
of a ``call_one`` round trip (`benchmarks/hot_path.py`, with and without
``--bind``; docs/performance.md).

So the runtime loop's thread of a proc stays on one CPU, its home (`settle`),
and the proc's other threads wait for hand-offs there (`wait_at_home`): on the
waker's CPU, which comes free as soon as the waker waits in turn. A thread has
the process's CPUs back as soon as it wakes, so the work it then does (an
endpoint, torch's threads) spreads as before; so do the threads and processes
that the runtime loop's thread starts (`free_thread`).

Linux only; elsewhere, or where the process may not set its threads' CPUs,
nothing is pinned and every function here does nothing.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import TypeVar

log = logging.getLogger("danaus.home_cpu")

T = TypeVar("T")

_home: int | None = None
"""The CPU of this process's runtime loop thread, once it has settled there."""
_free: frozenset[int] | None = None
"""The CPUs this process had before its runtime loop thread settled."""


def process_cpus() -> list[int]:
    """The CPUs this process may run on, whatever its runtime loop thread is pinned to."""
    if _free is not None:
        return sorted(_free)
    if not hasattr(os, "sched_getaffinity"):
        return list(range(os.cpu_count() or 1))
    return sorted(os.sched_getaffinity(0))


def home_for(index: int) -> int | None:
    """The home of the ``index``-th proc a process starts on its host (0: its own), or None.

    Each proc has a CPU of its own while there are CPUs left, and none after:
    a CPU shared by the homes of several busy procs would hold their threads
    back where the kernel could have spread them (a broadcast to 4 procs on
    2 CPUs ran about 30% slower with shared homes). The CPUs are taken from one
    chosen by the process id on, so that two jobs on one host start apart.
    """
    cpus = process_cpus()
    if index >= len(cpus):
        return None
    return cpus[(os.getpid() + index) % len(cpus)]


def settle(cpu: int) -> None:
    """Pin the calling thread (the runtime loop's) to ``cpu``, the proc's home from now on."""
    global _home, _free
    if not hasattr(os, "sched_setaffinity"):
        return
    free = frozenset(os.sched_getaffinity(0))
    try:
        os.sched_setaffinity(0, {cpu})
    except OSError as exc:
        log.info("the runtime loop's thread stays unpinned: CPU %d refused (%s)", cpu, exc)
        return
    _free, _home = free, cpu


def unsettle() -> None:
    """Forget the home: its runtime loop's thread has ended, and threads wait anywhere again."""
    global _home, _free
    _home = _free = None


def free_thread() -> None:
    """Give the calling thread every CPU of the process (a thread the runtime's thread started)."""
    if _free is not None:
        try:
            os.sched_setaffinity(0, _free)
        except OSError as exc:
            log.info("a thread keeps the runtime loop's CPU (%s)", exc)


def wait_at_home(wait: Callable[..., T], *args: object) -> T:
    """``wait(*args)``, with the calling thread woken on the proc's home CPU (if it has one)."""
    home = _home
    if home is None:
        return wait(*args)
    mask = os.sched_getaffinity(0)
    if mask == {home}:
        return wait(*args)
    try:
        os.sched_setaffinity(0, {home})
    except OSError:
        return wait(*args)
    try:
        return wait(*args)
    finally:
        os.sched_setaffinity(0, mask)
