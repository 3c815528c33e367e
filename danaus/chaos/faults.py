"""Real faults, on any transport: crash, pause and resume the procs under a mesh.

On ``sim`` they are simulated exactly (and deterministically); on real
transports they are signals sent by the launcher (SIGKILL, SIGSTOP, SIGCONT).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from danaus.core.actor_mesh import placement_of
from danaus.core.config import current_world


def _procs(mesh: Any) -> list[str]:
    return list(dict.fromkeys(proc for proc, _ in placement_of(mesh).targets()))


def _apply(fault: Callable[[str], object], procs: list[str]) -> list[str]:
    for proc in procs:
        fault(proc)
    return procs


def crash(mesh: Any) -> list[str]:
    """Kill the procs of ``mesh`` (a slice, usually) at once, as SIGKILL would; their ids."""
    return _apply(current_world().faults.crash, _procs(mesh))


def pause(mesh: Any) -> list[str]:
    """Freeze the procs of ``mesh``, as SIGSTOP would: they stop answering heartbeats."""
    return _apply(current_world().faults.pause, _procs(mesh))


def resume(mesh: Any) -> list[str]:
    """Let paused procs of ``mesh`` run again (if they have not been declared lost)."""
    return _apply(current_world().faults.resume, _procs(mesh))
