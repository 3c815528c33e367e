"""The pdb of a rank stopped at ``breakpoint()``: its prompt is served by the controller.

Output is kept until pdb asks for a line; then it travels with the ask to the
controller (`danaus.debug.sessions.exchange`), and the line typed at
`danaus debug` comes back as the answer. The session ends when the rank runs
on without breakpoints (``continue``) or quits.
"""

from __future__ import annotations

import functools
import logging
import os
import pdb
import socket
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

from danaus.admin.views import SessionView
from danaus.core.instance import Instance
from danaus.core.transport import ROOT
from danaus.debug import sessions

log = logging.getLogger("danaus.debug")

SKIP = ["danaus.core.*", "asyncio.*", "concurrent.futures.*", "contextvars", "threading"]
"""Modules pdb never stops in: stepping out of an endpoint does not land in Danaus."""


def _ask_controller(fn: Callable[..., Any], *args: Any) -> Any:
    """Run ``fn(*args, controller_runtime)`` on the controller and wait for its answer."""
    from danaus.core.agent_refs import agent_of

    return agent_of(ROOT).probe.call_one(functools.partial(fn, *args)).get()


class _Prompt:
    """pdb's stdin and stdout: output is kept until pdb asks for a line, then sent with the ask."""

    def __init__(self, session: int) -> None:
        self.session = session
        self._output: list[str] = []

    def write(self, text: str) -> int:
        self._output.append(text)
        return len(text)

    def flush(self) -> None:
        pass

    def take(self) -> str:
        text = "".join(self._output)
        self._output.clear()
        return text

    def readline(self) -> str:
        try:
            return _ask_controller(sessions.exchange, self.session, self.take())
        except Exception as exc:
            print(f"danaus: debugger lost the controller ({exc!r}); continuing", file=sys.stderr)
            return "continue\n"


class RankDebugger(pdb.Pdb):
    """A pdb for one stopped rank, prompting through the controller."""

    def __init__(self, instance: Instance, frame: FrameType) -> None:
        running = instance.running_call
        code = frame.f_code
        view = SessionView(
            id=0,
            actor_id=instance.actor_id,
            mesh=instance.name,
            rank=instance.rank.rank,
            coords=dict(instance.rank),
            proc=instance.proc_id,
            host=socket.gethostname(),
            pid=os.getpid(),
            method=running.method if running is not None else None,
            location=f"{code.co_filename}:{frame.f_lineno} in {code.co_name}",
        )
        self._prompt = _Prompt(_ask_controller(sessions.register, view))
        super().__init__(stdin=self._prompt, stdout=self._prompt, skip=SKIP, nosigint=True)
        print(
            f"danaus: {instance.name}[{view.rank}] ({instance.actor_id}) stopped at breakpoint() "
            f"at {view.location}; attach with `danaus debug` (session {self._prompt.session})",
            file=sys.stderr,
            flush=True,
        )

    def get_stack(self, f: FrameType | None, t: Any) -> tuple[list[Any], int]:
        """The stack from the first frame of user code: Danaus's and asyncio's are left out."""
        stack, index = super().get_stack(f, t)
        first = 0
        while first < index and self.is_skipped_module(stack[first][0].f_globals.get("__name__")):
            first += 1
        return stack[first:], index - first

    def set_continue(self) -> None:
        super().set_continue()
        if not self.breaks:
            self._finish()

    def set_quit(self) -> None:
        super().set_quit()
        self._finish()

    def _finish(self) -> None:
        try:
            _ask_controller(sessions.finish, self._prompt.session, self._prompt.take())
        except Exception as exc:
            log.warning("could not end debugger session %s: %r", self._prompt.session, exc)
