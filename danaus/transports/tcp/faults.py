"""Faults on real processes: crashes and pauses are signals, sent by the proc's launcher.

A proc on this host is signalled by the controller's launcher; one on an
attached host, by that host's agent (the directory knows which). Network
faults (delay, clogs, partitions) need control of the network, which a set of
processes does not have; they raise `FaultUnsupported`.
"""

from __future__ import annotations

import signal
from functools import partial
from typing import TYPE_CHECKING

from danaus.core.faults import Faults, Heal

if TYPE_CHECKING:
    from danaus.transports.tcp.world import TcpWorld


class SignalFaults(Faults):
    """SIGKILL, SIGSTOP and SIGCONT to the job's worker processes, on any host."""

    def __init__(self, world: TcpWorld) -> None:
        self._world = world

    def workers(self, host: str) -> list[str]:
        world = self._world
        if world.directory is None:
            raise RuntimeError("faults are injected from the controller")
        return sorted(world.directory.procs_on(host))

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
        world.io.call_soon(world.directory.signal, proc, sig)
