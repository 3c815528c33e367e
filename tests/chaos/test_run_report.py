"""A chaos run over many seeds ends with its failures grouped by signature, and writes them as
an HTML page and as JUnit XML."""

from __future__ import annotations

import io
import re
import shlex
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from html.parser import HTMLParser
from pathlib import Path

import pytest
from rich.console import Console
from rich.progress import Progress

from danaus.chaos import run_seeds
from danaus.chaos.checkers import Violation
from danaus.chaos.cli import PROGRESS
from danaus.chaos.groups import group_failures, headline, signature
from tests.chaos.scenarios import FailsTwoWays

ROOT = Path(__file__).resolve().parents[2]
TARGET = "tests/chaos/scenarios.py::FailsTwoWays"
SEEDS = range(0, 30)


def chaos(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "danaus", "chaos", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def expected() -> dict[tuple[str, ...], list[int]]:
    """The failing seeds of the run, by what their violations say with numbers taken out."""
    ways: dict[tuple[str, ...], list[int]] = {}
    for outcome in run_seeds(FailsTwoWays(), SEEDS):
        if outcome.failed:
            ways.setdefault(signature(outcome), []).append(outcome.seed)
    assert len(ways) == 2
    return ways


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> tuple[subprocess.CompletedProcess[str], Path]:
    directory = tmp_path_factory.mktemp("run")
    ran = chaos(
        "run",
        TARGET,
        "--seeds",
        f"{SEEDS.start}:{SEEDS.stop}",
        "--quiet",
        "--report",
        str(directory / "run.html"),
        "--junit-xml",
        str(directory / "run.xml"),
    )
    return ran, directory


def test_a_signature_takes_the_numbers_out_and_names_an_exception_by_its_last_line():
    assert headline(Violation("invariant", "write k45=45 lost at 4.89 s")) == (
        "[invariant] write kN=N lost at N s"
    )
    raised = "run() raised:\nTraceback (most recent call last):\n  File x\nKeyError: 'k7'"
    assert headline(Violation("workload", raised)) == "[workload] KeyError: 'kN'"


def test_failures_are_grouped_by_signature_largest_group_first(expected):
    groups = group_failures(run_seeds(FailsTwoWays(), SEEDS))
    assert {g.signature: g.seeds for g in groups} == expected
    assert [len(g.seeds) for g in groups] == sorted((len(s) for s in expected.values()), reverse=1)
    assert all(g.seed == min(g.seeds) == g.outcome.seed for g in groups)


def test_the_run_ends_with_each_group_its_smallest_seed_and_replay_command(run, expected):
    ran, _ = run
    assert ran.returncode == 1, ran.stderr
    lines = ran.stdout.splitlines()
    start = lines.index("failing seeds by signature (2 groups):")
    summary = lines[start:]
    failed = sum(len(seeds) for seeds in expected.values())
    assert re.fullmatch(
        rf"FailsTwoWays: 30 seeds, {failed} failed in 2 groups, "
        r"[0-9.]+ s \([0-9,]+ seeds per minute\)",
        summary[-1],
    )
    for way, seeds in expected.items():
        header = next(n for n, line in enumerate(summary) if line.endswith(way[0]))
        assert f"{len(seeds)} seeds: " in summary[header]
        assert summary[header + len(way)].strip().startswith(f"smallest seed {min(seeds)}; ")
        replay = summary[header + len(way) + 1].strip().removeprefix("replay: ")
        command = shlex.split(replay)
        assert command[:4] == ["danaus", "chaos", "replay", TARGET]
        assert command[command.index("--seed") + 1] == str(min(seeds))
        again = chaos(*command[2:])
        assert again.returncode == 1
        assert f"seed {min(seeds)}: FAILED" in again.stdout
    # Two groups, each shown once with its seed's details: not one report per failing seed.
    assert len(lines) < 40, ran.stdout


def test_one_seed_and_one_failure_are_singular():
    ran = chaos("run", TARGET, "--seeds", "0", "--quiet")
    assert ran.returncode == 1
    assert "FailsTwoWays: 1 seed, 1 failed in 1 group, " in ran.stdout
    assert "1 seed: " in ran.stdout
    for plural in ("1 seeds", "1 groups", "1 violations"):  # as words: "4,231 seeds" is right
        assert not re.search(rf"(?<![\d,]){plural}", ran.stdout), ran.stdout


def test_the_progress_bar_labels_its_counts_and_times():
    console = Console(file=io.StringIO(), width=200, record=True)
    progress = Progress(*PROGRESS, console=console)
    task = progress.add_task("KVStore", total=10, failed=1)
    progress.update(task, advance=3)
    console.print(progress.make_tasks_table(progress.tasks))
    shown = console.export_text()
    time = r"(\d+:\d\d:\d\d|-:--:--)"
    assert re.search(rf"3/10 seeds, failed: 1, elapsed {time} left {time}", shown), shown


def test_junit_xml_has_a_case_per_seed_and_a_failure_per_failing_seed(run, expected):
    _, directory = run
    suite = ElementTree.parse(directory / "run.xml").getroot().find("testsuite")
    assert suite is not None
    failing = {seed for seeds in expected.values() for seed in seeds}
    assert suite.get("tests") == "30" and suite.get("failures") == str(len(failing))
    cases = {case.get("name"): case for case in suite.iter("testcase")}
    assert set(cases) == {f"seed {seed}" for seed in SEEDS}
    for seed in SEEDS:
        failure = cases[f"seed {seed}"].find("failure")
        assert (failure is not None) == (seed in failing)
        if failure is not None:
            assert f"--seed {seed}" in (failure.text or "")


class _Page(HTMLParser):
    """What a report page holds: its groups' ids, and whether it links or loads anything."""

    def __init__(self) -> None:
        super().__init__()
        self.groups: list[str] = []
        self.diagrams = 0
        self.fetches: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "section" and found.get("class") == "group":
            self.groups.append(found.get("id") or "")
        if tag == "svg" and found.get("class") == "diagram":
            self.diagrams += 1
        if tag in ("script", "link", "img", "iframe") or "src" in found:
            self.fetches.append(tag)


def test_the_html_report_has_figures_and_each_group_with_plan_and_diagram(run, expected):
    _, directory = run
    text = (directory / "run.html").read_text()
    page = _Page()
    page.feed(text)
    assert page.groups == ["group-1", "group-2"]
    assert page.diagrams == 2
    assert page.fetches == []
    assert "seeds per minute" in text
    assert "shrunk plan (0 faults, the smallest that still fails)" in text
    for way, seeds in expected.items():
        assert f"Smallest seed <b>{min(seeds)}</b>" in text
        assert way[0] in text
