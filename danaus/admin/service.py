"""The controller's answers to `danaus top` and `danaus debug`, whatever carries the requests.

A snapshot asks every live proc for its `ProcView` at once (through
``ProcAgent.probe``), each within `PROBE_TIMEOUT`: a proc that is paused or
overloaded shows as not answering rather than holding up the view.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import TYPE_CHECKING

import msgspec

from danaus.admin import protocol
from danaus.admin.probes import proc_view
from danaus.admin.views import FailureView, JobView, ProcView
from danaus.core.mesh import agent_of
from danaus.debug.sessions import NoSession, Sessions

if TYPE_CHECKING:
    from danaus.core.transport import World

PROBE_TIMEOUT = 0.8
"""How long a snapshot waits for each proc (seconds): below the one-second refresh."""
MAX_FAILURES = 200
"""How many failures a snapshot carries, newest first."""


class AdminService:
    """Answers admin requests on the controller's runtime loop."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.sessions = Sessions(world.root)
        self._failures: dict[tuple[str, str], FailureView] = {}
        """Every failure seen, by (proc, what), stamped with when it was first seen."""

    async def answer(self, request: protocol.Request) -> protocol.Answer:
        """The answer to ``request``; `Refused` if it cannot be served."""
        try:
            if isinstance(request, protocol.Snapshot):
                return await self.snapshot()
            if isinstance(request, protocol.ListSessions):
                return protocol.Sessions(self.sessions.views())
            if isinstance(request, protocol.ReadSession):
                return await self.sessions.read(request.session)
            return await self.sessions.send(request.session, request.line)
        except NoSession as exc:
            return protocol.Refused(str(exc))

    async def snapshot(self) -> JobView:
        """Every live proc's view, the failures seen so far, and the stopped ranks."""
        world = self.world
        root = world.root
        started = time.perf_counter()
        root.client.enter()
        workers = [p for p in world.live_workers() if p != root.proc_id]
        procs = [proc_view(root), *await asyncio.gather(*(self._probe(p) for p in workers))]
        now = world.loop.time()
        for view in procs:
            for failure in view.failures:
                key = (failure.proc, failure.what)
                if key not in self._failures:
                    self._failures[key] = msgspec.structs.replace(failure, seen=now)
        failures = sorted(self._failures.values(), key=lambda f: f.seen, reverse=True)
        return JobView(
            pid=os.getpid(),
            transport=world.name,
            at=now,
            gather_seconds=time.perf_counter() - started,
            procs=procs,
            failures=failures[:MAX_FAILURES],
            sessions=self.sessions.views(),
        )

    async def _probe(self, proc: str) -> ProcView:
        try:
            view = await asyncio.wait_for(agent_of(proc).probe.call_one(proc_view), PROBE_TIMEOUT)
        except Exception:
            return ProcView(proc_id=proc, answered=False)
        return view
