"""Finding a planted bug, shrinking its plan, replaying it exactly."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, find, settings
from kvstore import BuggyKV, KVStore

from danaus.chaos import ChaosFailure, Plan, check_seed, run_scenario, run_seeds, shrink
from danaus.chaos.strategies import plans

ROOT = Path(__file__).resolve().parents[2]

SEED_BUDGET = 100


@pytest.fixture(scope="module")
def first_failure():
    outcomes = run_seeds(BuggyKV(), range(SEED_BUDGET))
    failing = [o for o in outcomes if o.failed]
    assert failing, f"the planted bug was not found in {SEED_BUDGET} seeds"
    return failing[0]


def test_the_planted_bug_is_found_and_shrunk_to_a_fault_or_two(first_failure):
    assert all(v.checker == "invariant" for v in first_failure.violations)
    smallest, outcome = shrink(BuggyKV(), first_failure.seed, first_failure.plan)
    assert outcome.failed
    assert 1 <= len(smallest) <= 2
    assert len(smallest) <= len(first_failure.plan)


def test_replay_reproduces_the_failure_exactly(first_failure):
    again = run_scenario(BuggyKV(), first_failure.seed)
    assert again.digest == first_failure.digest
    assert [str(v) for v in again.violations] == [str(v) for v in first_failure.violations]


def test_the_fixed_store_passes_the_seeds_that_break_the_buggy_one(first_failure):
    assert not run_scenario(KVStore(), first_failure.seed).failed


def test_check_seed_reports_the_plan_and_the_replay_command(first_failure):
    with pytest.raises(ChaosFailure) as info:
        check_seed(BuggyKV(), first_failure.seed)
    message = str(info.value)
    assert "acknowledged write" in message
    assert f"--seed {first_failure.seed}" in message
    assert first_failure.plan.faults[0].describe() in message


def test_hypothesis_finds_and_shrinks_a_failing_plan():
    scenario = BuggyKV()
    smallest = find(
        plans(hosts=scenario.hosts, duration=scenario.duration, kinds=scenario.kinds),
        lambda plan: run_scenario(scenario, 0, plan).failed,
        settings=settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck)),
    )
    assert len(smallest) == 1
    assert smallest.faults[0].kind in ("crash", "crash_host", "pause", "partition")


def test_the_cli_runs_seeds_and_prints_a_replay_command_that_reproduces():
    target = "examples/chaos/kvstore.py::BuggyKV"
    found = subprocess.run(
        [
            sys.executable,
            "-m",
            "danaus.cli",
            "chaos",
            "run",
            target,
            "--seeds",
            "0:40",
            "--shrink",
            "--quiet",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert found.returncode == 1, found.stderr
    replays = [
        line.split("replay: ", 1)[1] for line in found.stdout.splitlines() if "replay: " in line
    ]
    assert replays, found.stdout
    command = shlex.split(replays[0])
    assert command[:3] == ["danaus", "chaos", "replay"]
    replayed = subprocess.run(
        [sys.executable, "-m", "danaus.cli", *command[1:]],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert replayed.returncode == 1
    assert "acknowledged write" in replayed.stdout
    assert Plan.from_json(command[command.index("--plan") + 1])


@pytest.mark.chaos_seeds(0, 5)
def test_the_pytest_marker_runs_one_test_per_seed(chaos_seed, request):
    assert request.node.name == f"test_the_pytest_marker_runs_one_test_per_seed[seed{chaos_seed}]"
    check_seed(KVStore(), chaos_seed)
