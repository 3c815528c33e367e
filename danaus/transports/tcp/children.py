"""The processes a launcher started that have not ended: what may be asked of them, and done.

The launcher adds each process it starts and removes it once it has exited.
Meanwhile the directory (in the controller) and the host agent's control
messages (on another host) signal it and ask what it is doing, through this
table only: they need nothing else of the launcher. Everything here runs on
the I/O thread.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO

from danaus.core.transport import ProcSpec
from danaus.transports.tcp import control
from danaus.transports.tcp.activity import ProcessActivity
from danaus.transports.tcp.ioloop import Settle

STDOUT, STDERR = 1, 2


@dataclass
class Child:
    """A started process, watched until it exits."""

    spec: ProcSpec
    pid: int
    stdout: IO[bytes]
    stderr: IO[bytes]
    pidfd: int
    started: Settle
    stderr_tail: list[str] = field(default_factory=list)
    partial: dict[int, bytes] = field(default_factory=dict)
    exited: Settle | None = None
    """Settled once it has exited, after it was asked to (None: not asked)."""
    activity: ProcessActivity = field(init=False)

    def __post_init__(self) -> None:
        self.activity = ProcessActivity(self.pid)

    def outputs(self) -> tuple[tuple[IO[bytes], int], ...]:
        """The worker's stdout and stderr pipes, each with the stream it is copied to."""
        return (self.stdout, STDOUT), (self.stderr, STDERR)


class Children:
    """The running processes of one launcher, by proc (I/O thread)."""

    def __init__(self) -> None:
        self._by_proc: dict[str, Child] = {}

    def add(self, child: Child) -> None:
        self._by_proc[child.spec.proc_id] = child

    def get(self, proc: str) -> Child | None:
        return self._by_proc.get(proc)

    def remove(self, proc: str) -> None:
        self._by_proc.pop(proc, None)

    def procs(self) -> list[str]:
        """The procs whose processes still run."""
        return list(self._by_proc)

    def kill(self, proc: str, sig: int = signal.SIGKILL) -> None:
        """Signal ``proc``'s process, if it is one of these."""
        child = self._by_proc.get(proc)
        if child is not None:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(child.pidfd, sig)

    def kill_all(self) -> None:
        for proc in list(self._by_proc):
            self.kill(proc)

    def state(self, proc: str) -> control.ProcessState | None:
        """What ``proc``'s process is doing (`ProcessActivity`); None if it is not one of these."""
        child = self._by_proc.get(proc)
        if child is None:
            return None
        if child.exited is not None:
            return "ending"
        return child.activity.state()


Output = Callable[[int, str], None]
"""Where the lines a launcher's children write go: ``(stream, text)``, stream `STDOUT` or
`STDERR`."""
