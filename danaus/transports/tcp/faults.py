"""Faults on real processes: crashes and pauses are the launcher's signals.

Network faults (delay, clogs, partitions) need control of the network, which a
set of processes on one host does not have; they raise `FaultUnsupported`.
"""

from __future__ import annotations

import signal
from functools import partial
from typing import TYPE_CHECKING

from danaus.core.faults import Faults, Heal

if TYPE_CHECKING:
    from danaus.transports.tcp.world import TcpWorld


class SignalFaults(Faults):
    """SIGKILL, SIGSTOP and SIGCONT to the controller's worker processes."""

    def __init__(self, world: TcpWorld) -> None:
        self._world = world

    def workers(self, host: str) -> list[str]:
        world = self._world
        return sorted(world.launcher.children()) if host in world.hosts() else []

    def crash(self, proc: str) -> None:
        self._signal(proc, signal.SIGKILL)

    def pause(self, proc: str) -> Heal:
        self._signal(proc, signal.SIGSTOP)
        return partial(self.resume, proc)

    def resume(self, proc: str) -> None:
        self._signal(proc, signal.SIGCONT)

    def _signal(self, proc: str, sig: int) -> None:
        world = self._world
        if world.directory is None:
            raise RuntimeError("faults are injected from the controller")
        world.io.call_soon(world.launcher.kill, proc, sig)
