"""A chaos run split into parts, as the tasks of an array job run it, merges into the run one
machine gives; a part cut short keeps what it finished and runs only the rest again. Here the
tasks run by hand, without SLURM (tests/job/test_chaos_array.py runs them on a cluster)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from danaus.chaos import Fault, Plan
from danaus.chaos.array import ArrayRun, ArraySpec, location_of
from danaus.chaos.array_task import run_task
from danaus.chaos.checkers import Violation
from danaus.chaos.results import SeedResult
from danaus.chaos.runner import checks_determinism
from danaus.job.slurm_array import array_indices
from tests.chaos.test_run_report import ROOT, SEEDS, TARGET, chaos


def a_run(directory: Path, tasks: int = 3, seeds: range = SEEDS) -> ArrayRun:
    spec = ArraySpec(
        target=TARGET,
        location=location_of(str(ROOT / TARGET.partition("::")[0]) + "::FailsTwoWays"),
        scenario="FailsTwoWays",
        seeds=seeds,
        tasks=tasks,
        determinism=0.2,
    )
    return ArrayRun.create(directory / "run", spec)


def summary(output: str) -> list[str]:
    """What a run found, without how long it took or where it ran."""
    lines = output.splitlines()
    found = lines[lines.index("failing seeds by signature (2 groups):") :]
    return [line for line in found if not line.startswith(("ran in ", "FailsTwoWays: "))]


def test_the_parts_cover_the_seeds_once_in_near_equal_slices():
    spec = ArraySpec("t::S", "t::S", "S", range(5, 1005), 7, 0.0)
    parts = [spec.part(i) for i in range(7)]
    assert [seed for part in parts for seed in part] == list(range(5, 1005))
    assert {len(part) for part in parts} <= {142, 143}
    with pytest.raises(ValueError, match="cannot be split over 11 tasks"):
        ArraySpec("t::S", "t::S", "S", range(10), 11, 0.0)


def test_which_seeds_check_determinism_does_not_depend_on_the_parts():
    whole = [seed for seed in range(1000) if checks_determinism(seed, 0.1)]
    second_half = [seed for seed in range(500, 1000) if checks_determinism(seed, 0.1)]
    assert 60 < len(whole) < 140
    assert second_half == [seed for seed in whole if seed >= 500]


def test_array_indices_are_runs_of_ranges():
    assert array_indices([0, 1, 2, 3]) == "0-3"
    assert array_indices([7, 3, 1, 2, 9, 10]) == "1-3,7,9-10"
    assert array_indices([4]) == "4"


def test_a_seed_result_is_one_line_of_json_and_back():
    plan = Plan((Fault(at=1.5, kind="crash", target=(1, 2)),))
    failed = SeedResult(26, 0.0123, (Violation("invariant", "k1=1 lost\nmore"),), plan)
    assert "\n" not in failed.to_json()
    assert SeedResult.from_json(json.loads(failed.to_json())) == failed
    passed = SeedResult(27, 0.5)
    assert passed.to_json() == '{"seed":27,"duration":0.5}'


def test_tasks_run_by_hand_merge_into_the_run_one_machine_gives(tmp_path):
    run = a_run(tmp_path)
    assert [run_task(run, index) for index in range(3)] == [10, 10, 10]
    merged = run.merge()
    assert [r.seed for r in merged.results] == list(SEEDS) and not merged.unfinished
    here = chaos("run", TARGET, "--seeds", "0:30", "--quiet", "--determinism", "0.2")
    there = chaos("merge", str(run.directory), "--quiet")
    assert there.returncode == here.returncode == 1, there.stderr
    assert summary(there.stdout) == summary(here.stdout)


def test_a_part_cut_short_keeps_what_it_finished_and_runs_only_the_rest(tmp_path):
    run = a_run(tmp_path, tasks=2)
    run_task(run, 0)
    path = run.results_path(1)
    whole = [SeedResult(seed, 0.01).to_json() for seed in range(15, 19)]
    path.write_text("\n".join(whole) + '\n{"seed":19,"dura')  # the task died mid-line
    merged = run.merge()
    assert merged.unfinished == {1: 4}
    merging = chaos("merge", str(run.directory), "--quiet", "--junit-xml", str(tmp_path / "x"))
    assert merging.returncode == 1
    assert "task 1 (seeds 15:30): 4 of 15 seeds ran;" in merging.stdout
    assert f"rerun: danaus chaos rerun {run.directory} --task 1" in merging.stdout
    assert ", 11 not run, " in merging.stdout
    assert 'errors="1"' in (tmp_path / "x").read_text()
    assert run_task(run, 1) == 11
    lines = path.read_text().splitlines()
    assert lines[4] == '{"seed":19,"dura'  # the torn line stays a line of its own
    assert '"start"' in lines[5]
    assert [r.seed for r in run.merge().results] == list(SEEDS)
    assert not run.merge().unfinished


def test_mistakes_are_refused_with_a_reason(tmp_path):
    a_run(tmp_path)
    again = chaos(
        "run", TARGET, "--seeds", "0:30", "--slurm-array", "3", "--slurm-dir", f"{tmp_path}/run"
    )
    assert again.returncode == 2 and "holds a run already" in again.stderr
    on_tcp = chaos("run", TARGET, "--slurm-array", "2", "--transport", "tcp")
    assert on_tcp.returncode == 2 and "on the simulator" in on_tcp.stderr
    too_many = chaos("run", TARGET, "--seeds", "0:3", "--slurm-array", "4", "--slurm-dir", "x")
    assert too_many.returncode == 2 and "cannot be split over 4 tasks" in too_many.stderr
    nothing = chaos("merge", str(tmp_path))
    assert nothing.returncode == 2 and "holds no chaos array run" in nothing.stderr
