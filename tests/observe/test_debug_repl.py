"""The ``danaus debug>`` prompt: help for each command, aliases, a table of the stopped ranks,
and on a terminal, Tab completion and the lines typed in earlier runs."""

from __future__ import annotations

import io
import sys
import textwrap
from pathlib import Path

import pexpect
import pytest

from danaus.admin import protocol
from danaus.admin.views import SessionView
from danaus.debug.repl import PROMPT, DebugRepl
from danaus.debug.sessions import DebugOutput

pytestmark = pytest.mark.timeout(120)

SESSIONS = [
    SessionView(
        id=n,
        actor_id=f"root:3/trainer[{n - 1}]",
        mesh="trainer",
        rank=n - 1,
        coords={"gpus": n - 1},
        proc=f"root:1.{n - 1}",
        host="vm",
        pid=3000 + n,
        method="step",
        location="/tmp/dbg.py:8 in step",
    )
    for n in (1, 2, 12)
]


class Controller:
    """A job's controller as the prompt sees it: three ranks stopped; pdb echoes lines."""

    def __init__(self) -> None:
        self.sent: list[tuple[int, str]] = []

    def ask(self, request: protocol.Request, timeout: float | None = None) -> protocol.Answer:
        if isinstance(request, protocol.ListSessions):
            return protocol.Sessions(SESSIONS)
        if isinstance(request, protocol.ReadSession):
            return DebugOutput("(Pdb) ", False)
        assert isinstance(request, protocol.SendLine)
        self.sent.append((request.session, request.line))
        return DebugOutput("", True) if request.line == "continue" else DebugOutput("(Pdb) ", False)


def typed(lines: str) -> tuple[str, Controller]:
    controller = Controller()
    shown = io.StringIO()
    assert DebugRepl(controller, io.StringIO(lines), shown).run() == 0
    return shown.getvalue(), controller


def test_help_lists_the_commands_and_tells_each():
    shown, _ = typed("help\nhelp attach\nquit\n")
    listed = shown[shown.index("Documented commands") :].split("\n\n")[0]
    for command in ("attach", "continue", "list", "quit"):
        assert command in listed
    assert "EOF" not in listed
    assert "attach N (a N): pdb in session N" in shown


def test_the_stopped_ranks_are_a_table_and_aliases_work():
    shown, controller = typed("l\na 12\np x\ncontinue\nc\nfrobnicate\nq\n")
    rows = [line.split() for line in shown.splitlines() if line.lstrip().startswith("12 ")]
    assert rows and rows[0][:6] == ["12", "trainer", "gpus=11", "root:1.11", "3012", "step"]
    assert controller.sent[:2] == [(12, "p x"), (12, "continue")]
    assert "session 12 ended: the rank runs on" in shown
    assert "3 ranks continued" in shown
    assert "unknown command 'frobnicate'; type help" in shown


def test_session_ids_complete():
    repl = DebugRepl(Controller(), io.StringIO(), io.StringIO())
    assert repl.complete_attach("1", "attach 1", 7, 8) == ["1", "12"]
    assert repl.completenames("att") == ["attach"]


SCRIPT = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {root!r})
    from tests.observe.test_debug_repl import Controller
    from danaus.debug.repl import DebugRepl
    DebugRepl(Controller()).run()
    """
)


def test_on_a_terminal_tab_completes_and_earlier_lines_come_back(tmp_path):
    root = str(Path(__file__).resolve().parents[2])
    env = {"XDG_STATE_HOME": str(tmp_path), "TERM": "dumb", "PATH": "/usr/bin:/bin"}

    def prompt() -> pexpect.spawn:
        child = pexpect.spawn(
            sys.executable, ["-c", SCRIPT.format(root=root)], env=env, encoding="utf-8"
        )
        child.expect_exact(PROMPT)
        return child

    first = prompt()
    first.send("li\t")  # Tab completes the command
    first.send("\r")
    first.expect_exact("stopped at")
    first.expect_exact(PROMPT)
    first.sendline("quit")
    first.expect(pexpect.EOF)
    assert "list" in (tmp_path / "danaus" / "debug-history").read_text()

    second = prompt()
    second.send("\x1b[A\x1b[A")  # the up arrow, twice: 'quit', then 'list' of the earlier run
    second.send("\r")
    second.expect_exact("stopped at")
    second.expect_exact(PROMPT)
    second.sendeof()
    second.expect(pexpect.EOF)
