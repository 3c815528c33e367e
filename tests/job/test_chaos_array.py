"""``danaus chaos run --slurm-array`` on a SLURM cluster of three nodes on this host: the tasks
run on the nodes and their results merge into the run one machine gives; a task killed midway
keeps what it finished, is reported by its seeds, and runs the rest alone when rerun."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path

from tests.chaos.scenarios import DIES_AT
from tests.job.conftest import ROOT
from tests.job.test_slurm import queue

SCENARIOS = "tests/chaos/scenarios.py"
SEEDS = "0:30"


def chaos(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "danaus", "chaos", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **(env or {})},
    )


def found(output: str) -> list[str]:
    """What a run found: its groups with their seeds and replay commands, the parts left
    unfinished, its counts; not how long it took, nor where it ran."""
    lines = output.splitlines()
    start = next(n for n, line in enumerate(lines) if line.startswith("failing seeds by"))
    count = re.sub(r"^\w+: (.*), [0-9.]+ s \(.*\)$", r"\1", lines[-1])
    return [line for line in lines[start:-1] if not line.startswith("ran in ")] + [count]


def cases(path: Path) -> dict[str, str | None]:
    """A JUnit file's test cases, each with its failure's message (None: passed)."""
    suite = ElementTree.parse(path).getroot().find("testsuite")
    assert suite is not None
    return {
        str(case.get("name")): (failure.get("message") if failure is not None else None)
        for case in suite.iter("testcase")
        for failure in [case.find("failure")]
    }


def test_the_seeds_run_on_the_nodes_and_merge_into_the_run_one_machine_gives(
    slurm_cluster, tmp_path
):
    target = f"{SCENARIOS}::FailsTwoWays"
    here = chaos(
        "run", target, "--seeds", SEEDS, "--quiet", "--shrink",
        "--junit-xml", f"{tmp_path}/here.xml",
    )  # fmt: skip
    there = chaos(
        "run", target, "--seeds", SEEDS, "--quiet", "--slurm-array", "3",
        "--slurm-dir", f"{tmp_path}/run", "--junit-xml", f"{tmp_path}/there.xml",
        "--report", f"{tmp_path}/there.html",
    )  # fmt: skip
    assert there.returncode == here.returncode == 1, there.stdout + there.stderr
    assert found(there.stdout) == found(here.stdout)
    assert "2 groups" in found(there.stdout)[0]
    ran_in = next(line for line in there.stdout.splitlines() if line.startswith("ran in 3 tasks"))
    nodes = ran_in.split(" on ")[1].split(";")[0].split(", ")
    assert nodes and set(nodes) <= {"n1", "n2", "n3"}, ran_in
    assert cases(tmp_path / "there.xml") == cases(tmp_path / "here.xml")
    page = (tmp_path / "there.html").read_text()
    assert page.count('<section class="group"') == 2 and page.count('class="diagram"') == 2
    for task in range(3):
        log = (tmp_path / "run" / "logs" / f"task-{task}.out").read_text()
        assert f"task {task}: ran 10 seeds of 10" in log
    assert queue() == ""


def test_a_task_killed_midway_keeps_its_results_and_its_rerun_runs_only_the_rest(
    slurm_cluster, tmp_path
):
    marker = tmp_path / "dies"
    marker.touch()
    dies = {DIES_AT: f"14:{marker}"}  # seed 14, of task 1 (seeds 10 to 19): killed once
    directory = tmp_path / "run"
    first = chaos(
        "run", f"{SCENARIOS}::DiesOnce", "--seeds", SEEDS, "--quiet", "--slurm-array", "3",
        "--slurm-dir", str(directory), "--junit-xml", f"{tmp_path}/first.xml",
    env=dies)  # fmt: skip
    assert first.returncode == 1, first.stdout + first.stderr
    assert not marker.exists()
    report = first.stdout.splitlines()
    part = next(line for line in report if line.strip().startswith("task 1 (seeds 10:20)"))
    assert "4 of 10 seeds ran; SLURM job " in part
    assert "_1 ended FAILED" in part and "exit code 0:9" in part, part
    assert ", 6 not run, " in report[-1]
    rerun = next(line for line in report if line.strip().startswith("rerun: "))
    command = shlex.split(rerun.strip().removeprefix("rerun: "))
    assert command == ["danaus", "chaos", "rerun", str(directory), "--task", "1"]
    errors = ElementTree.parse(tmp_path / "first.xml").getroot().find("testsuite")
    assert errors is not None and errors.get("errors") == "1"

    second = chaos(*command[2:], "--quiet", env=dies)
    assert second.returncode == 1, second.stdout + second.stderr
    log = (directory / "logs" / "task-1.out").read_text()
    assert "task 1: ran 6 seeds of 10" in log
    assert "unfinished" not in second.stdout and "not run" not in second.stdout
    whole = chaos("run", f"{SCENARIOS}::DiesOnce", "--seeds", SEEDS, "--quiet")
    assert found(second.stdout) == found(whole.stdout)
    assert queue() == ""
