"""``pytest --danaus-sim --danaus-seeds``: an unchanged suite on the simulator, over seeds."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

EXAMPLE = ROOT / "examples" / "simulator"

FRESH_WORLDS = """
import os
from danaus import this_host
from danaus.core import config


def test_each_seed_gets_a_fresh_world():
    assert config.installed() is None
    world = config.current_world()
    assert world.name == "sim"
    assert world.schedule_seed == int(os.environ["DANAUS_SCHEDULE_SEED"])
    this_host().spawn_procs({"gpus": 1})
"""


def pytest_in(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(EXAMPLE)])}
    env.pop("DANAUS_TRANSPORT", None)
    env.pop("DANAUS_SCHEDULE_SEED", None)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_bug_on_some_seeds_is_reported_with_its_replay_command_and_traces(tmp_path):
    shutil.copy(EXAMPLE / "test_racy_ledger.py", tmp_path / "test_ledger.py")
    (tmp_path / "test_fresh.py").write_text(FRESH_WORLDS)
    found = pytest_in(
        tmp_path, "--danaus-sim", "--danaus-seeds", "0:20", "test_ledger.py", "test_fresh.py"
    )
    out = found.stdout
    assert found.returncode == 1, out
    assert "1 failed, 1 passed" in out
    assert "2 tests ran on schedule seeds 0:20: 1 passed on every seed, 1 failed on some" in out
    failing = out.split("failed on schedule seeds ", 1)[1].split(" of 0:20", 1)[0]
    seeds = [int(s) for s in failing.split(", ")]
    assert 0 not in seeds and 17 in seeds
    test = "test_ledger.py::test_entries_are_in_the_order_written"
    replay = f"pytest --danaus-sim --danaus-seeds {seeds[0]} {test}"
    assert f"replay seed {seeds[0]}: {replay}" in out

    again = pytest_in(tmp_path, *replay.split()[1:], "--danaus-traces", "traces")
    assert again.returncode == 1, again.stdout
    assert f"failed on schedule seed {seeds[0]} of {seeds[0]}" in again.stdout
    pictures = sorted((tmp_path / "traces").rglob("*.html"))
    assert pictures and "<svg" in pictures[0].read_text()
    assert sorted((tmp_path / "traces").rglob("*.perfetto.json"))

    default = pytest_in(tmp_path, "--danaus-sim", "test_ledger.py", "test_fresh.py")
    assert default.returncode == 0, default.stdout
    assert "2 tests ran on schedule seeds 0: 2 passed on every seed" in default.stdout


TIMED = """
import pytest


@pytest.mark.timeout(30)
def test_timed():
    pass
"""

COUNT_TIMERS = """
from pathlib import Path

import pytest


def pytest_timeout_set_timer(item, settings):
    with open(Path(__file__).parent / "timers", "a") as log:
        log.write(f"{settings.timeout}\\n")
"""


def test_each_seed_gets_the_tests_whole_timeout(tmp_path):
    (tmp_path / "test_timed.py").write_text(TIMED)
    (tmp_path / "conftest.py").write_text(COUNT_TIMERS)
    done = pytest_in(tmp_path, "--danaus-sim", "--danaus-seeds", "0:4", "test_timed.py")
    assert done.returncode == 0, done.stdout
    assert (tmp_path / "timers").read_text().split() == ["30.0"] * 4


RECORD_DURATIONS = """
from pathlib import Path

import pytest

import pytest

LOG = Path(__file__).parent


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    report = (yield).get_result()
    with open(LOG / "per_seed", "a") as log:
        log.write(f"{report.when} {report.duration!r}\\n")


def pytest_runtest_logreport(report):
    with open(LOG / "reported", "a") as log:
        log.write(f"{report.when} {report.duration!r}\\n")
"""


def durations(path: Path) -> dict[str, list[float]]:
    found: dict[str, list[float]] = {}
    for line in path.read_text().splitlines():
        when, seconds = line.split()
        found.setdefault(when, []).append(float(seconds))
    return found


def test_a_tests_reported_duration_is_that_of_all_its_seeds(tmp_path):
    (tmp_path / "test_timed.py").write_text(TIMED)
    (tmp_path / "conftest.py").write_text(RECORD_DURATIONS)
    done = pytest_in(tmp_path, "--danaus-sim", "--danaus-seeds", "0:4", "test_timed.py")
    assert done.returncode == 0, done.stdout
    per_seed, reported = durations(tmp_path / "per_seed"), durations(tmp_path / "reported")
    assert sorted(reported) == sorted(per_seed) == ["call", "setup", "teardown"]
    for when, seeds in per_seed.items():
        assert len(seeds) == 4
        assert reported[when] == [pytest.approx(sum(seeds), rel=1e-12)]
