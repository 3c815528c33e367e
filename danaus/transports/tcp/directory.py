"""The controller's directory: where each proc receives, whether it is alive, who watches it.

It lives on the controller's I/O thread. Procs register when they start
(`Hello`), ask where peers are (`Where`), and ask to be told of losses
(`Watch`). The directory learns of losses from the launcher (a process
exited: noticed at once through a pidfd) and from heartbeats (a process that
stops answering for ``heartbeat_timeout`` seconds is declared lost and killed,
so it cannot come back as a zombie member of the job).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from danaus.core.transport import ProcLoss
from danaus.transports.tcp import control
from danaus.transports.tcp.ioloop import IoLoop

log = logging.getLogger("danaus.directory")


@dataclass
class _Entry:
    address: control.Address
    pid: int
    host: str
    last_heard: float = field(default_factory=time.monotonic)


class Directory:
    """Addresses and liveness of every proc of the job."""

    def __init__(
        self,
        send: Callable[[str, control.Control], None],
        io: IoLoop,
        *,
        heartbeat_interval: float,
        heartbeat_timeout: float,
        kill: Callable[[str], None],
    ) -> None:
        self._send = send
        self._io = io
        self._interval = heartbeat_interval
        self._timeout = heartbeat_timeout
        self._kill = kill
        self._entries: dict[str, _Entry] = {}
        self._lookups: dict[str, dict[str, None]] = {}
        self._watchers: dict[str, dict[str, None]] = {}
        self._losses: dict[str, ProcLoss] = {}
        self._on_hello: dict[str, Callable[[], None]] = {}
        self._ping = 0
        io.call_soon(io.call_later, heartbeat_interval, self._heartbeat)

    def register_local(self, proc: str, address: control.Address, pid: int, host: str) -> None:
        """Enter a proc of this process (it never needs heartbeats)."""
        self._entries[proc] = _Entry(address, pid, host, float("inf"))

    def expect(self, proc: str, on_hello: Callable[[], None]) -> None:
        """Call ``on_hello`` when ``proc`` registers."""
        self._on_hello[proc] = on_hello

    def handle(self, src: str, message: control.Control) -> None:
        if isinstance(message, control.Hello):
            self._hello(src, message)
        elif isinstance(message, control.Where):
            self._lookup(src, message.proc)
        elif isinstance(message, control.Watch):
            self._watch(src, message.proc)
        elif isinstance(message, control.Pong):
            entry = self._entries.get(src)
            if entry is not None:
                entry.last_heard = time.monotonic()
        else:
            log.error("directory: unexpected %s from %s", type(message).__name__, src)

    def _hello(self, proc: str, hello: control.Hello) -> None:
        if proc in self._losses:
            log.error("directory: %s registered after it was declared lost; ignored", proc)
            return
        self._entries[proc] = _Entry(hello.address, hello.pid, hello.host)
        for requester in self._lookups.pop(proc, {}):
            self._send(requester, control.At(proc, hello.address))
        callback = self._on_hello.pop(proc, None)
        if callback is not None:
            callback()

    def _lookup(self, requester: str, proc: str) -> None:
        if proc in self._losses:
            self._send(requester, control.Lost.of(self._losses[proc]))
        elif proc in self._entries:
            self._send(requester, control.At(proc, self._entries[proc].address))
        else:
            self._lookups.setdefault(proc, {})[requester] = None

    def _watch(self, requester: str, proc: str) -> None:
        if proc in self._losses:
            self._send(requester, control.Lost.of(self._losses[proc]))
        else:
            self._watchers.setdefault(proc, {})[requester] = None

    def lost(self, loss: ProcLoss) -> None:
        """``loss.proc`` is gone: tell everyone who watches or looks for it (once)."""
        if loss.proc in self._losses:
            return
        self._losses[loss.proc] = loss
        self._entries.pop(loss.proc, None)
        self._on_hello.pop(loss.proc, None)
        notice = control.Lost.of(loss)
        interested = {**self._watchers.pop(loss.proc, {}), **self._lookups.pop(loss.proc, {})}
        for requester in interested:
            if requester not in self._losses:
                self._send(requester, notice)

    def last_heard(self, proc: str) -> float | None:
        """When ``proc`` last answered a heartbeat (``time.monotonic``), if it is known."""
        entry = self._entries.get(proc)
        return entry.last_heard if entry is not None else None

    def address(self, proc: str) -> control.Address | None:
        entry = self._entries.get(proc)
        return entry.address if entry is not None else None

    def _heartbeat(self) -> None:
        now = time.monotonic()
        self._ping += 1
        for proc, entry in list(self._entries.items()):
            if now - entry.last_heard > self._timeout:
                self.lost(
                    ProcLoss(
                        proc,
                        f"stopped answering heartbeats for {self._timeout:g} s",
                        host=entry.host,
                        pid=entry.pid,
                    )
                )
                self._kill(proc)
            elif entry.last_heard != float("inf"):
                self._send(proc, control.Ping(self._ping))
        self._io.call_later(self._interval, self._heartbeat)
