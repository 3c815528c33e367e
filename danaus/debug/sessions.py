"""The controller's side of the debugger: ranks stopped at ``breakpoint()`` and their prompts.

A rank that stops registers a session here and then, each time its pdb wants
a line, hands over what pdb printed and waits (`exchange`); `danaus debug`
reads that output and sends the lines typed (`read`, `send`). All of it runs
on the controller's runtime loop: ranks reach it through ``ProcAgent.probe``
with the functions at the end of this module, the tool through the admin
socket (`danaus.admin.service`).
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import msgspec

from danaus.admin.views import SessionView

if TYPE_CHECKING:
    from danaus.core.runtime import Runtime

LOST_CHECK = 1.0
"""How often a reader waiting on a running rank checks that its proc still lives (seconds)."""


class DebugOutput(msgspec.Struct, frozen=True, tag="debug-output"):
    """What a stopped rank's pdb printed since it was last read; ``ended`` once it runs on."""

    output: str
    ended: bool


class NoSession(LookupError):
    """No rank is stopped under that session id (it continued, or never was)."""


@dataclass
class _Session:
    view: SessionView
    output: list[str] = field(default_factory=list)
    prompt: asyncio.Future[str] | None = None
    """Set while the rank's pdb waits for a line: settles with the line."""
    ended: bool = False
    changed: asyncio.Event = field(default_factory=asyncio.Event)


class Sessions:
    """The stopped ranks of one job, on its controller."""

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime
        self._sessions: dict[int, _Session] = {}
        self._ids = itertools.count(1)

    def register(self, view: SessionView) -> int:
        """A rank stopped: its session id."""
        session = _Session(msgspec.structs.replace(view, id=next(self._ids)))
        self._sessions[session.view.id] = session
        self._runtime.watch(view.proc)
        return session.view.id

    async def exchange(self, session_id: int, output: str) -> str:
        """Hand over pdb's output; the next line typed at the prompt."""
        session = self._get(session_id)
        session.output.append(output)
        session.prompt = asyncio.get_running_loop().create_future()
        session.changed.set()
        return await session.prompt

    def finish(self, session_id: int, output: str) -> None:
        """The rank runs on: its last output, and its session ends."""
        session = self._sessions.pop(session_id, None)
        if session is not None:
            session.output.append(output)
            self._end(session)

    def views(self) -> list[SessionView]:
        """The stopped ranks, in the order they stopped."""
        return [s.view for s in self._sessions.values()]

    async def read(self, session_id: int) -> DebugOutput:
        """What the rank printed; waits while it runs (after ``next``, say) until it prompts."""
        session = self._get(session_id)
        while session.prompt is None and not session.ended:
            session.changed.clear()
            try:
                await asyncio.wait_for(session.changed.wait(), LOST_CHECK)
            except asyncio.TimeoutError:
                if self._runtime.is_lost(session.view.proc):
                    self._sessions.pop(session_id, None)
                    session.output.append(f"\nproc {session.view.proc} is gone\n")
                    self._end(session)
        output = "".join(session.output)
        session.output.clear()
        return DebugOutput(output, session.ended)

    async def send(self, session_id: int, line: str) -> DebugOutput:
        """Type ``line`` at the rank's prompt; what it prints next (`read`)."""
        session = self._get(session_id)
        if session.prompt is None:
            raise NoSession(f"rank of session {session_id} is running, not at a prompt")
        prompt, session.prompt = session.prompt, None
        if not prompt.done():
            prompt.set_result(line if line.endswith("\n") else line + "\n")
        return await self.read(session_id)

    def _get(self, session_id: int) -> _Session:
        session = self._sessions.get(session_id)
        if session is None:
            raise NoSession(f"no rank is stopped in session {session_id}")
        return session

    @staticmethod
    def _end(session: _Session) -> None:
        session.ended = True
        session.prompt = None
        session.changed.set()


def sessions_of(runtime: Runtime) -> Sessions:
    """The debugger sessions of the controller ``runtime`` belongs to."""
    admin = getattr(runtime.world, "admin", None)
    if admin is None:
        raise RuntimeError("this job's controller serves no debugger")
    return admin.sessions


def register(view: SessionView, runtime: Runtime) -> int:
    return sessions_of(runtime).register(view)


async def exchange(session_id: int, output: str, runtime: Runtime) -> str:
    return await sessions_of(runtime).exchange(session_id, output)


def finish(session_id: int, output: str, runtime: Runtime) -> None:
    sessions_of(runtime).finish(session_id, output)
