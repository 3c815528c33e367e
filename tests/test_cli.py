"""The ``danaus`` command: mistakes give one line and status 2, help shows every default, and
every command that writes a trace takes ``--trace FILE`` the same way."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

from danaus.cli import parser
from danaus.core import trace

ROOT = Path(__file__).resolve().parent.parent
KVSTORE = "examples/chaos/kvstore.py"


def danaus(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "danaus", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("args", "command", "says"),
    [
        (
            ["chaos", "run", f"{KVSTORE}::KVStore", "--transport", "bogus"],
            "danaus chaos run",
            "invalid choice: 'bogus'",
        ),
        (
            ["chaos", "replay", f"{KVSTORE}::KVStore", "--seed", "1", "--plan", "notjson"],
            "danaus chaos replay",
            "--plan: not a fault plan",
        ),
        (
            ["chaos", "replay", f"{KVSTORE}::KVStore", "--seed", "1", "--plan", '[{"at": 1}]'],
            "danaus chaos replay",
            "no field 'kind'",
        ),
        (["sim", "--hosts", "0", "examples/getting_started.py::main"], "danaus sim", "at least 1"),
        (["run", "nofile.py"], "danaus run", "no such file: nofile.py"),
        (["sim", "nofile.py::main"], "danaus sim", "no such file: nofile.py"),
        (
            ["chaos", "run", f"{KVSTORE}::Replica"],
            "danaus chaos run",
            "the class Replica, not a scenario",
        ),
        (
            ["chaos", "run", f"{KVSTORE}::KVStore", "--seeds", "10:5"],
            "danaus chaos run",
            "10:5 holds no seed",
        ),
        (
            ["chaos", "run", f"{KVSTORE}::KVStore", "--determinism", "2"],
            "danaus chaos run",
            "between 0 and 1",
        ),
        (["chaos"], "danaus chaos", "required"),
        (["key", "--out", "pyproject.toml"], "danaus key", "exists already"),
    ],
    ids=lambda value: value if isinstance(value, str) else None,
)
def test_a_mistake_gives_one_line_naming_the_command_and_status_2(args, command, says):
    result = danaus(*args)
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"{command}: "), lines[0]
    assert says in lines[0]


def _commands(top: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """Every parser under ``top``, ``top`` included."""
    found = [top]
    for action in top._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                found += _commands(sub)
    return found


def test_every_option_has_help_that_shows_its_default():
    for command in _commands(parser()):
        help_text = command.format_help()
        for action in command._actions:
            if not action.option_strings or isinstance(
                action, (argparse._HelpAction, argparse._VersionAction)
            ):
                continue
            name = f"{command.prog} {action.option_strings[0]}"
            assert action.help, f"{name} has no help"
            if action.default not in (None, False, []):
                assert f"(default: {action.default})" in " ".join(help_text.split()), name


def test_the_top_level_help_has_no_markup():
    result = danaus("--help")
    assert result.returncode == 0
    assert "``" not in result.stdout
    assert "danaus --version" not in result.stdout
    for command in ("sim", "run", "chaos", "debug", "top", "worker", "job", "key"):
        assert f"    {command} " in result.stdout


def test_every_command_that_writes_a_trace_takes_trace_file_the_same_way():
    options = {}
    for command in _commands(parser()):
        for action in command._actions:
            if "--trace" in action.option_strings:
                kind = type(action).__name__
                options[command.prog] = (action.metavar, repr(action.default), kind)
    assert set(options) == {"danaus sim", "danaus run", "danaus chaos replay"}
    assert len(set(options.values())) == 1, options
    for command in _commands(parser()):
        flags = {flag for action in command._actions for flag in action.option_strings}
        assert not flags & {"--perfetto", "--html"}, command.prog


def _written_forms(directory: Path) -> None:
    """The three files a command wrote with ``--trace`` are in the forms their names give."""
    events = trace.read(directory / "t.jsonl")
    assert events
    perfetto = json.loads((directory / "t.json").read_text())
    assert perfetto["traceEvents"]
    page = (directory / "t.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and 'class="diagram"' in page


def test_sim_and_replay_write_each_trace_in_the_form_its_name_gives(tmp_path):
    traces = ["--trace", "t.jsonl", "--trace", "t.json", "--trace", "t.html"]
    (tmp_path / "sim").mkdir()
    target = str(ROOT / "examples/getting_started.py") + "::main"
    ran = danaus("sim", target, *traces, cwd=tmp_path / "sim")
    assert ran.returncode == 0, ran.stderr
    _written_forms(tmp_path / "sim")
    (tmp_path / "replay").mkdir()
    scenario = str(ROOT / KVSTORE) + "::KVStore"
    ran = danaus("chaos", "replay", scenario, "--seed", "3", *traces, cwd=tmp_path / "replay")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    _written_forms(tmp_path / "replay")
