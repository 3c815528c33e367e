"""``danaus debug``: list the ranks stopped at ``breakpoint()`` and attach a pdb prompt to one.

The ``danaus debug>`` prompt is a `cmd.Cmd`: ``help`` lists the commands and ``help
COMMAND`` tells one; on a terminal, Tab completes commands and session ids, and the
arrow keys go through the lines typed before, in this run and earlier ones (kept in
`history_file`). The stopped ranks are shown as a `rich` table.
"""

from __future__ import annotations

import cmd
import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol, TextIO

from rich.console import Console
from rich.table import Table

from danaus.admin import protocol
from danaus.admin.views import SessionView
from danaus.debug.sessions import DebugOutput
from danaus.wording import counted

PROMPT = "danaus debug> "
HISTORY_LINES = 1000
ALIASES = {"l": "list", "ls": "list", "a": "attach", "c": "continue", "q": "quit", "exit": "quit"}


class Asks(Protocol):
    def ask(self, request: protocol.Request, timeout: float | None = None) -> protocol.Answer: ...


def session_table(sessions: list[SessionView]) -> Table | str:
    """The stopped ranks as a table, one row each (a sentence when there is none)."""
    if not sessions:
        return "no rank is stopped at breakpoint()"
    table = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
    for column in ("id", "actor", "rank", "proc", "pid", "endpoint", "stopped at"):
        table.add_column(column, no_wrap=True)
    for s in sessions:
        coords = ",".join(f"{k}={v}" for k, v in s.coords.items()) or str(s.rank)
        table.add_row(str(s.id), s.mesh, coords, s.proc, str(s.pid), s.method or "-", s.location)
    return table


def history_file() -> Path:
    """Where the lines typed at the prompt are kept between runs."""
    state = os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")
    return Path(state) / "danaus" / "debug-history"


class DebugRepl(cmd.Cmd):
    """The ``danaus debug>`` prompt over a connection to a job's controller."""

    prompt = PROMPT

    def __init__(self, client: Asks, stdin: TextIO = sys.stdin, stdout: TextIO = sys.stdout):
        super().__init__(stdin=stdin, stdout=stdout)
        self._client = client
        # On the process's own terminal, lines are read with readline (editing, Tab, history).
        self.use_rawinput = stdin is sys.stdin and stdout is sys.stdout
        # Wide enough never to cut a row: a table is as wide as its cells need.
        self._console = Console(file=stdout, width=1000, highlight=False)

    def run(self) -> int:
        """Serve the prompt until ``quit`` or the end of input."""
        with self._history():
            try:
                self.cmdloop(f"{self._listing()}type help for the commands")
            except KeyboardInterrupt:
                self._say("")
        return 0

    def do_list(self, arg: str) -> None:
        """list (l): the stopped ranks, with their session ids."""
        self._show_sessions(self._sessions())

    def do_attach(self, arg: str) -> None:
        """attach N (a N): pdb in session N; its `continue` lets the rank run on and brings
        you back here; Ctrl-D leaves the rank stopped. Without N, the only stopped rank."""
        which = arg.strip()
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

    def complete_attach(self, text: str, line: str, begidx: int, endidx: int) -> list[str]:
        return [str(s.id) for s in self._sessions() if str(s.id).startswith(text)]

    def do_continue(self, arg: str) -> None:
        """continue (c): let every stopped rank run on."""
        sessions = self._sessions()
        for s in sessions:
            answer = self._client.ask(protocol.SendLine(s.id, "continue"))
            if isinstance(answer, protocol.Refused):
                self._say(f"session {s.id}: {answer.reason}")
        self._say(f"{counted(len(sessions), 'rank')} continued")

    def do_quit(self, arg: str) -> bool:
        """quit (q, Ctrl-D): leave; stopped ranks stay stopped."""
        return True

    def do_EOF(self, arg: str) -> bool:
        """Ctrl-D: as quit."""
        self._say("")
        return True

    def precmd(self, line: str) -> str:
        verb, sep, rest = line.strip().partition(" ")
        return f"{ALIASES.get(verb, verb)}{sep}{rest}"

    def emptyline(self) -> bool:
        return False  # an empty line does nothing (not the last command again)

    def default(self, line: str) -> None:
        self._say(f"unknown command {line.split()[0]!r}; type help")

    def get_names(self) -> list[str]:
        return [name for name in super().get_names() if name != "do_EOF"]

    def _sessions(self) -> list[SessionView]:
        answer = self._client.ask(protocol.ListSessions())
        assert isinstance(answer, protocol.Sessions)
        return answer.sessions

    def _listing(self) -> str:
        with self._console.capture() as captured:
            self._console.print(session_table(self._sessions()))
        return captured.get()

    def _show_sessions(self, sessions: list[SessionView]) -> None:
        self._console.print(session_table(sessions))
        self.stdout.flush()

    def _talk(self, session: int) -> None:
        """Relay pdb's output and the lines typed until the session ends or you leave it."""
        answer = self._client.ask(protocol.ReadSession(session))
        while isinstance(answer, DebugOutput):
            self.stdout.write(answer.output)
            self.stdout.flush()
            if answer.ended:
                self._say(f"session {session} ended: the rank runs on")
                return
            line = self._input()
            if line is None:
                self._say(f"\ndetached from session {session}; the rank stays stopped")
                return
            answer = self._client.ask(protocol.SendLine(session, line))
        self._say(answer.reason if isinstance(answer, protocol.Refused) else repr(answer))

    def _input(self) -> str | None:
        """A line typed for pdb, which printed its prompt (None at end of input or Ctrl-C)."""
        try:
            if self.use_rawinput:
                return input()
            line = self.stdin.readline()
            return line.rstrip("\n") if line else None
        except (EOFError, KeyboardInterrupt):
            return None

    def _say(self, text: str) -> None:
        self.stdout.write(text + "\n")
        self.stdout.flush()

    @contextlib.contextmanager
    def _history(self) -> Iterator[None]:
        """Lines typed on the terminal in earlier runs come back with the arrow keys."""
        if not self.use_rawinput:
            yield
            return
        try:
            import readline
        except ImportError:  # no readline here: no history, still a prompt
            yield
            return
        path = history_file()
        with contextlib.suppress(OSError):
            readline.read_history_file(path)
        try:
            yield
        finally:
            readline.set_history_length(HISTORY_LINES)
            with contextlib.suppress(OSError):
                path.parent.mkdir(parents=True, exist_ok=True)
                readline.write_history_file(path)
