"""The controller's answers to the admin tools (top, debug, dashboard), whatever carries them.

A snapshot asks every live proc for its `ProcView` at once (through
``ProcAgent.probe``), each within `PROBE_TIMEOUT`: a proc that is paused or
overloaded shows as not answering rather than holding up the view. Stacks and
profiles ask one proc (`danaus.admin.stacks`); logs come from the controller's
`LogBook`; the trace from every live proc (`danaus.tracing`).
"""

from __future__ import annotations

import asyncio
import functools
import os
import time
from typing import TYPE_CHECKING, Any

import msgspec

from danaus.admin import protocol, stacks
from danaus.admin.logs import LogBook
from danaus.admin.probes import proc_view
from danaus.admin.views import EndedView, FailureView, JobView, ProcView, TraceView
from danaus.core.agent_refs import agent_of
from danaus.debug.sessions import NoSession, Sessions
from danaus.tracing import gather_events

if TYPE_CHECKING:
    from collections.abc import Callable

    from danaus.core.runtime import Runtime
    from danaus.core.transport import World

PROBE_TIMEOUT = 0.8
"""How long a snapshot waits for each proc (seconds): below the one-second refresh."""
STACKS_TIMEOUT = 5.0
"""How long a stack dump waits for its proc (seconds)."""
TRACE_TIMEOUT = 5.0
"""How long gathering the trace waits for each proc (seconds)."""
MAX_FAILURES = 200
"""How many failures a snapshot carries, newest first."""
MAX_ENDED = 1000
"""How many ended procs a snapshot carries, newest last."""


class AdminService:
    """Answers admin requests on the controller's runtime loop."""

    def __init__(self, world: World, logs: LogBook) -> None:
        self.world = world
        self.sessions = Sessions(world.root)
        self.logs = logs
        """The procs' latest output lines; the world's output goes through `LogBook.tee`."""
        self._failures: dict[tuple[str, str], FailureView] = {}
        """Every failure seen, by (proc, what), stamped with when it was first seen."""
        self._last: dict[str, ProcView] = {}
        """Each proc's latest answer: where a silent proc runs."""

    async def answer(self, request: protocol.Request) -> protocol.Answer:
        """The answer to ``request``; `Refused` if it cannot be served."""
        try:
            if isinstance(request, protocol.Snapshot):
                return await self.snapshot()
            if isinstance(request, protocol.Stacks):
                return await self._run_on(request.proc, stacks.thread_stacks, STACKS_TIMEOUT)
            if isinstance(request, protocol.Profile):
                stacks.check_profile(request.seconds, request.hz)
                sample = functools.partial(stacks.profile, seconds=request.seconds, hz=request.hz)
                return await self._run_on(request.proc, sample, request.seconds + STACKS_TIMEOUT)
            if isinstance(request, protocol.Logs):
                return self.logs.after(request.after)
            if isinstance(request, protocol.Trace):
                return await self.trace()
            if isinstance(request, protocol.ListSessions):
                return protocol.Sessions(self.sessions.views())
            if isinstance(request, protocol.ReadSession):
                return await self.sessions.read(request.session)
            return await self.sessions.send(request.session, request.line)
        except (NoSession, LookupError, ValueError, TimeoutError) as exc:
            return protocol.Refused(str(exc) or type(exc).__name__)

    async def snapshot(self) -> JobView:
        """Every live proc's view, the failures seen so far, the ended procs and stopped ranks."""
        world = self.world
        root = world.root
        started = time.perf_counter()
        root.client.enter()
        workers = [p for p in world.live_workers() if p != root.proc_id]
        procs = [proc_view(root), *await asyncio.gather(*(self._probe(p) for p in workers))]
        for gone in self._last.keys() - set(workers):
            del self._last[gone]
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
            ended=self._ended(root, workers),
        )

    def _ended(self, root: Runtime, live: list[str]) -> list[EndedView]:
        """The procs the controller learned are gone, but for those that came back."""
        running = set(live)
        return [
            EndedView(
                proc_id=loss.proc,
                host=loss.host,
                pid=loss.pid,
                state="stopped" if loss.exit_code == 0 else "failed",
                reason=loss.describe(),
            )
            for loss in root.losses()
            if loss.proc not in running
        ][-MAX_ENDED:]

    async def _probe(self, proc: str) -> ProcView:
        try:
            view = await asyncio.wait_for(agent_of(proc).probe.call_one(proc_view), PROBE_TIMEOUT)
        except Exception:
            last = self._last.get(proc)
            host, pid = (last.host, last.pid) if last is not None else ("", None)
            return ProcView(proc_id=proc, host=host, pid=pid, answered=False)
        self._last[proc] = view
        return view

    async def _run_on(self, proc: str, fn: Callable[[Runtime], Any], timeout: float) -> Any:
        """``fn(runtime)`` run on ``proc`` (here, for the controller's own), within ``timeout``."""
        root = self.world.root
        if proc == root.proc_id:
            result = fn(root)
            return await result if asyncio.iscoroutine(result) else result
        if proc not in self.world.live_workers():
            raise LookupError(f"no live proc {proc!r} in this job")
        root.client.enter()
        try:
            return await asyncio.wait_for(agent_of(proc).probe.call_one(fn), timeout)
        except asyncio.TimeoutError:
            raise TimeoutError(f"proc {proc} did not answer within {timeout:.0f} s") from None

    async def trace(self) -> TraceView:
        """Every live proc's trace so far, with what the controller kept."""
        world = self.world
        if not world.trace.enabled:
            return TraceView(recording=False, events=[])
        return TraceView(recording=True, events=await gather_events(world, TRACE_TIMEOUT))
