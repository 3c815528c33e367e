"""Where the dashboard's views come from: a running job's admin socket, or a simulated run.

A `Source` answers what the page asks: snapshots, new log lines, one proc's
stacks or profile, the trace. `JobSource` asks a job's controller over its
admin socket (`danaus.admin.protocol`), as `danaus top` does; the simulator's
is `danaus.dashboard.simulated.SimSource`.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

import msgspec

from danaus.admin import protocol
from danaus.admin.jobfile import JobFile
from danaus.admin.views import JobView, LogsView, ProfileView, StacksView, TraceView
from danaus.transports.tcp.admin import AdminClient

SNAPSHOT_TIMEOUT = 10.0
"""Seconds a snapshot or a page of logs may take before the page says the job does not answer."""
STACKS_TIMEOUT = 10.0

A = TypeVar("A")


class SourceInfo(msgspec.Struct, frozen=True):
    """What the page says it shows."""

    kind: str
    """``job`` or ``simulation``."""
    title: str
    details: dict[str, str]
    stacks: bool
    """Whether its procs' stacks can be taken."""


class SourceUnavailable(Exception):
    """The source cannot answer: the job ended, refused the request, or is not answering."""


class Source(Protocol):
    epoch: int
    """Changes when what the source shows goes back in time (a replay rewound): start afresh."""

    def describe(self) -> SourceInfo: ...

    def tick(self) -> None:
        """Once per refresh, before the snapshot (a replay moves its cursor on)."""

    def status(self) -> msgspec.Struct | None:
        """Where a replay stands (None for a running job)."""

    async def snapshot(self) -> JobView: ...

    async def before(self) -> JobView | None:
        """A view to count rates from, if not the previous snapshot."""

    async def logs(self, after: int) -> LogsView: ...

    async def stacks(self, proc: str) -> StacksView: ...

    async def profile(self, proc: str, seconds: float, hz: float) -> ProfileView: ...

    async def trace(self) -> TraceView: ...

    def close(self) -> None: ...


class JobSource:
    """A running job, through its controller's admin socket.

    Snapshots and logs, asked once a second, share one connection; requests
    for stacks, a profile or the trace each take a connection of their own from
    a pool (a new connection costs an encrypted handshake), so that a profile
    of several seconds never holds up the live view nor another request.
    """

    epoch = 0

    def __init__(self, job: JobFile) -> None:
        self.job = job
        self._client = AdminClient(job)
        self._lock = threading.Lock()
        self._idle: list[AdminClient] = []
        """Connections for requests on demand, not in use now."""

    def describe(self) -> SourceInfo:
        return SourceInfo(
            kind="job",
            title=f"job pid {self.job.pid} on {self.job.host}",
            details={
                "transport": self.job.transport,
                "command": " ".join(self.job.argv),
                "admin socket": self.job.address,
            },
            stacks=True,
        )

    def _ask_shared(self, request: protocol.Request, kind: type[A]) -> A:
        with self._lock:
            return protocol.expect(self._client.ask(request, timeout=SNAPSHOT_TIMEOUT), kind)

    def _ask_alone(self, request: protocol.Request, kind: type[A], timeout: float) -> A:
        try:
            client = self._idle.pop()
        except IndexError:
            client = AdminClient(self.job)
        try:
            answer = client.ask(request, timeout=timeout)
        except BaseException:
            client.close()
            raise
        self._idle.append(client)
        return protocol.expect(answer, kind)

    async def _run(self, fn: Callable[..., A], *args: Any) -> A:
        try:
            return await asyncio.to_thread(fn, *args)
        except (ConnectionError, TimeoutError, protocol.RequestRefused) as exc:
            raise SourceUnavailable(str(exc)) from None

    def tick(self) -> None:
        pass

    def status(self) -> None:
        return None

    async def snapshot(self) -> JobView:
        return await self._run(self._ask_shared, protocol.Snapshot(), JobView)

    async def before(self) -> None:
        return None

    async def logs(self, after: int) -> LogsView:
        return await self._run(self._ask_shared, protocol.Logs(after), LogsView)

    async def stacks(self, proc: str) -> StacksView:
        return await self._run(self._ask_alone, protocol.Stacks(proc), StacksView, STACKS_TIMEOUT)

    async def profile(self, proc: str, seconds: float, hz: float) -> ProfileView:
        request = protocol.Profile(proc, seconds, hz)
        return await self._run(self._ask_alone, request, ProfileView, seconds + STACKS_TIMEOUT)

    async def trace(self) -> TraceView:
        return await self._run(self._ask_alone, protocol.Trace(), TraceView, STACKS_TIMEOUT * 3)

    def close(self) -> None:
        with self._lock:
            self._client.close()
        while self._idle:
            self._idle.pop().close()
