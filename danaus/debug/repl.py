"""``danaus debug``: list the ranks stopped at ``breakpoint()`` and attach a pdb prompt to one.

Commands at the ``danaus debug>`` prompt:

* ``list`` (``l``): the stopped ranks, with their session ids;
* ``attach N`` (``a N``): talk to session N's pdb; its ``continue`` lets the
  rank run on and brings you back here, Ctrl-D leaves it stopped;
* ``continue`` (``c``): let every stopped rank run on;
* ``quit`` (``q``, Ctrl-D): leave; stopped ranks stay stopped.
"""

from __future__ import annotations

import sys
from typing import Protocol, TextIO

from danaus.admin import protocol
from danaus.admin.views import SessionView
from danaus.debug.sessions import DebugOutput

PROMPT = "danaus debug> "


class Asks(Protocol):
    def ask(self, request: protocol.Request, timeout: float | None = None) -> protocol.Answer: ...


def session_table(sessions: list[SessionView]) -> str:
    """The stopped ranks as a table, one line each."""
    if not sessions:
        return "no rank is stopped at breakpoint()"
    rows = [("id", "actor", "rank", "proc", "pid", "endpoint", "stopped at")]
    for s in sessions:
        coords = ",".join(f"{k}={v}" for k, v in s.coords.items()) or str(s.rank)
        rows.append((str(s.id), s.mesh, coords, s.proc, str(s.pid), s.method or "-", s.location))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[-1] for row in rows
    )


class DebugRepl:
    """The ``danaus debug>`` prompt over a connection to a job's controller."""

    def __init__(self, client: Asks, stdin: TextIO = sys.stdin, stdout: TextIO = sys.stdout):
        self._client = client
        self._in = stdin
        self._out = stdout

    def run(self) -> int:
        self._say(f"{self._list()}\ntype help for the commands")
        while True:
            line = self._input(PROMPT)
            if line is None:
                return 0
            verb, _, rest = line.strip().partition(" ")
            if verb in ("q", "quit", "exit"):
                return 0
            if verb in ("l", "list", "ls"):
                self._say(self._list())
            elif verb in ("a", "attach"):
                self._attach(rest.strip())
            elif verb in ("c", "continue"):
                self._continue_all()
            elif verb in ("h", "help", "?"):
                self._say(__doc__.split("\n\n", 1)[1].strip())
            elif verb:
                self._say(f"unknown command {verb!r}; type help")

    def _sessions(self) -> list[SessionView]:
        answer = self._client.ask(protocol.ListSessions())
        assert isinstance(answer, protocol.Sessions)
        return answer.sessions

    def _list(self) -> str:
        return session_table(self._sessions())

    def _attach(self, which: str) -> None:
        if not which:
            sessions = self._sessions()
            if len(sessions) != 1:
                self._say("attach which session? " + ("none is stopped" if not sessions else ""))
                return
            which = str(sessions[0].id)
        if not which.isdigit():
            self._say(f"attach takes a session id, not {which!r}")
            return
        try:
            self._talk(int(which))
        except KeyboardInterrupt:
            self._say(f"\ndetached from session {which}")

    def _talk(self, session: int) -> None:
        """Relay pdb's output and the lines typed until the session ends or you leave it."""
        answer = self._client.ask(protocol.ReadSession(session))
        while isinstance(answer, DebugOutput):
            self._out.write(answer.output)
            self._out.flush()
            if answer.ended:
                self._say(f"session {session} ended: the rank runs on")
                return
            line = self._input("")
            if line is None:
                self._say(f"\ndetached from session {session}; the rank stays stopped")
                return
            answer = self._client.ask(protocol.SendLine(session, line))
        self._say(answer.reason if isinstance(answer, protocol.Refused) else repr(answer))

    def _continue_all(self) -> None:
        sessions = self._sessions()
        for s in sessions:
            answer = self._client.ask(protocol.SendLine(s.id, "continue"))
            if isinstance(answer, protocol.Refused):
                self._say(f"session {s.id}: {answer.reason}")
        self._say(f"{len(sessions)} rank(s) continued")

    def _input(self, prompt: str) -> str | None:
        """A line typed (None at end of input or Ctrl-C)."""
        try:
            if self._in is sys.stdin and self._out is sys.stdout:
                return input(prompt)
            self._out.write(prompt)
            self._out.flush()
            line = self._in.readline()
            return line.rstrip("\n") if line else None
        except (EOFError, KeyboardInterrupt):
            return None

    def _say(self, text: str) -> None:
        self._out.write(text + "\n")
        self._out.flush()
