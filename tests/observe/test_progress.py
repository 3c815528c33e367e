"""Progress bars: on a terminal for long operations, never into redirected output."""

from __future__ import annotations

import subprocess

import pexpect
import pytest

from danaus.progress import Progress, wanted
from tests.observe.conftest import PYTHON, program

pytestmark = pytest.mark.timeout(120)

SPAWN = """
from danaus import Actor, endpoint, this_host

class Up(Actor):
    @endpoint
    def up(self) -> int:
        return 1

procs = this_host().spawn_procs(per_host={"gpus": 3})
print("started", sum(procs.spawn("up", Up).up.call().get().values()))
"""


def test_redirected_output_gets_no_bar(monkeypatch, capfd):
    monkeypatch.delenv("DANAUS_PROGRESS", raising=False)
    assert not wanted()
    with Progress("copying", 3, delay=0) as progress:
        for _ in range(3):
            progress.advance()
        assert not progress.visible
    assert capfd.readouterr() == ("", "")


def test_the_variable_forces_or_silences_it(monkeypatch, capfd):
    monkeypatch.setenv("DANAUS_PROGRESS", "0")
    assert not wanted()
    monkeypatch.setenv("DANAUS_PROGRESS", "1")
    with Progress("copying", 2) as progress:
        progress.advance()
        assert progress.visible
    assert not progress.visible
    assert "copying" in capfd.readouterr().err


def test_starting_procs_shows_a_bar_on_a_terminal_only(tmp_path, job_env):
    script = program(tmp_path, SPAWN)
    redirected = subprocess.run(
        [PYTHON, script], env=job_env, capture_output=True, text=True, timeout=100
    )
    assert redirected.returncode == 0, redirected.stderr
    assert redirected.stdout == "started 3\n" and "starting" not in redirected.stderr
    terminal = pexpect.spawn(
        PYTHON, [script], env={**job_env, "DANAUS_PROGRESS": "1"}, encoding="utf-8", timeout=100
    )
    try:
        terminal.expect_exact("starting 3 procs")
        terminal.expect_exact("started 3")
        terminal.expect(pexpect.EOF)
    finally:
        if terminal.isalive():
            terminal.terminate(force=True)
