"""``danaus chaos run --slurm-array``, ``danaus chaos merge`` and ``danaus chaos rerun``: a
run's seeds over the tasks of a SLURM array job (`danaus.chaos.array`).

``run --slurm-array N`` submits the array job, shows its progress as the
tasks write their results, and once no task is left in SLURM's queue merges
them and ends as a run on one machine does. ``merge DIR`` merges a run's
results as they are (while it runs, or after the submitting command was
stopped); ``rerun DIR`` submits again the tasks that did not finish (or those
named), each running only the seeds it has no result for, waits, and merges.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console

from danaus.argparsing import CommandError, UsageError, positive_int
from danaus.chaos.array import (
    ArrayRun,
    ArraySpec,
    NotAnArrayRun,
    SlurmOptions,
    location_of,
)
from danaus.chaos.cli import add_report_options, finish, progress_bar, scenario_from, shrink_groups
from danaus.chaos.groups import group_failures
from danaus.chaos.run_report import RunReport, Unfinished
from danaus.chaos.scenario import Scenario
from danaus.job import slurm_commands
from danaus.job.base import SchedulerMissing
from danaus.job.slurm_array import TaskState, task_states
from danaus.wording import counted

POLL = 2.0
"""Seconds between looks at the tasks' results and SLURM's queue."""


def add_slurm_options(group: Any) -> None:
    """The options of ``run --slurm-array``: where the run lives, how its tasks are submitted."""
    group.add_argument(
        "--slurm-dir",
        metavar="DIR",
        help="the run's directory, on a file system the nodes share "
        "(default .danaus/chaos/SCENARIO-START-STOP)",
    )
    group.add_argument("--slurm-partition", metavar="NAME", help="the partition of the tasks")
    group.add_argument(
        "--slurm-time", metavar="LIMIT", help="each task's time limit, as SLURM's --time"
    )
    group.add_argument(
        "--slurm-max-running",
        type=positive_int,
        metavar="N",
        help="run at most N tasks at once (default: as many as the cluster has room for)",
    )
    group.add_argument(
        "--sbatch-arg",
        action="append",
        default=[],
        metavar="OPTION",
        help="another option for sbatch, such as --sbatch-arg=--exclusive (repeatable)",
    )


def add_commands(verbs: Any, load: Callable[[str], Any], command: Callable[..., Any]) -> None:
    """``chaos merge`` and ``chaos rerun``."""
    merge = command(
        verbs,
        "merge",
        lambda args: _merge(args, load),
        help="merge what the tasks of a run on SLURM found so far",
    )
    merge.add_argument("dir", help="the run's directory (--slurm-dir)")
    add_report_options(merge)
    rerun = command(
        verbs,
        "rerun",
        lambda args: _rerun(args, load),
        help="run again the tasks of a run on SLURM that did not finish, then merge",
    )
    rerun.add_argument("dir", help="the run's directory (--slurm-dir)")
    rerun.add_argument(
        "--task",
        type=int,
        action="append",
        metavar="N",
        help="run task N again (repeatable; default: every task that did not finish)",
    )
    add_report_options(rerun)


def run(
    console: Console,
    args: argparse.Namespace,
    load: Callable[[str], Any],
    scenario: Scenario,
    seeds: range,
) -> int:
    """``chaos run --slurm-array``: submit, wait, merge."""
    if args.transport != "sim":
        raise UsageError("--slurm-array runs seeds on the simulator, not on --transport")
    shown = args.slurm_dir or f".danaus/chaos/{scenario.name}-{seeds.start}-{seeds.stop}"
    try:
        spec = ArraySpec(
            target=args.target,
            location=location_of(args.target),
            scenario=scenario.name,
            seeds=seeds,
            tasks=args.slurm_array,
            determinism=args.determinism,
            slurm=SlurmOptions(
                args.slurm_partition, args.slurm_time, args.sbatch_arg, args.slurm_max_running
            ),
        )
        array = ArrayRun.create(Path(shown), spec)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    job = _submit(array, None)
    console.print(
        f"{scenario.name}: seeds {seeds.start}:{seeds.stop} in SLURM array job {job} of "
        f"{counted(spec.tasks, 'task')}; results in {shown}",
        markup=False,
        highlight=False,
    )
    return _wait_and_merge(console, args, load, array, job, shown)


def _merge(args: argparse.Namespace, load: Callable[[str], Any]) -> int:
    return _report(Console(), args, load, _open(args.dir), args.dir)


def _rerun(args: argparse.Namespace, load: Callable[[str], Any]) -> int:
    console = Console()
    array = _open(args.dir)
    tasks = args.task or sorted(array.merge().unfinished)
    if not tasks:
        console.print("every task has run all its seeds: nothing to run again")
        return _report(console, args, load, array, args.dir)
    job = _submit(array, tasks)
    console.print(
        f"{counted(len(tasks), 'task')} ({', '.join(map(str, tasks))}) again in SLURM array "
        f"job {job}",
        markup=False,
        highlight=False,
    )
    return _wait_and_merge(console, args, load, array, job, args.dir)


def _open(directory: str) -> ArrayRun:
    try:
        return ArrayRun.open(Path(directory))
    except NotAnArrayRun as exc:
        raise UsageError(str(exc)) from None


def _submit(array: ArrayRun, tasks: list[int] | None) -> str:
    try:
        return array.submit(tasks)
    except ValueError as exc:
        raise UsageError(f"--task: {exc}") from None
    except (SchedulerMissing, RuntimeError) as exc:
        raise CommandError(str(exc)) from None


class _Tally:
    """The results the tasks have written so far, counted from what each file gained."""

    def __init__(self, array: ArrayRun) -> None:
        self._array = array
        self._read: dict[int, int] = {}
        self.seeds = 0
        self.failed = 0

    def update(self) -> None:
        for index in range(self._array.spec.tasks):
            offset = self._read.get(index, 0)
            try:
                with open(self._array.results_path(index), "rb") as results:
                    results.seek(offset)
                    gained = results.read()
            except FileNotFoundError:
                continue
            whole = gained[: gained.rfind(b"\n") + 1]  # a line being written counts once done
            self._read[index] = offset + len(whole)
            for line in whole.splitlines():
                if line.startswith(b'{"seed"'):
                    self.seeds += 1
                    self.failed += b'"violations"' in line


def _wait_and_merge(
    console: Console,
    args: argparse.Namespace,
    load: Callable[[str], Any],
    array: ArrayRun,
    job: str,
    shown: str,
) -> int:
    """Show the run's progress until SLURM has no task of ``job`` left, then merge."""
    tally = _Tally(array)
    try:
        with progress_bar(console, args) as progress:
            bar = progress.add_task(
                f"{array.spec.scenario} (job {job})", total=len(array.spec.seeds), failed=0
            )
            while True:
                queued = slurm_commands.queued(job)  # before counting: then every result is in
                tally.update()
                progress.update(bar, completed=tally.seeds, failed=tally.failed)
                if not queued:
                    break
                time.sleep(POLL)
    except KeyboardInterrupt:
        console.print(
            f"stopped waiting; SLURM job {job} runs on: danaus chaos merge {shown}",
            markup=False,
            highlight=False,
        )
        return 130
    except RuntimeError as exc:
        raise CommandError(str(exc)) from None
    return _report(console, args, load, array, shown)


def _why(array: ArrayRun, index: int, states: dict[str, dict[int, TaskState]]) -> str:
    """What is known of how task ``index`` ended: SLURM's word on its latest run, its log."""
    log = f"its log: {array.log_path(index)}"
    for job in reversed(array.spec.jobs):
        if job not in states:
            try:
                states[job] = task_states(job)
            except (SchedulerMissing, RuntimeError):
                states[job] = {}
        state = states[job].get(index)
        if state is None:
            continue
        if state.state in slurm_commands.ACTIVE:
            return f"still {state.state} in SLURM job {job}; {log}"
        where = f" on {state.node}" if state.node else ""
        return (
            f"SLURM job {job}_{index} ended {state.state}{where}, exit code "
            f"{state.exit_code}; {log}"
        )
    if not array.log_path(index).exists():
        return "it has not started (SLURM says nothing of it)"
    return f"SLURM no longer remembers how it ended; {log}"


def _report(
    console: Console,
    args: argparse.Namespace,
    load: Callable[[str], Any],
    array: ArrayRun,
    shown: str,
) -> int:
    """Merge the run's results and end as a run does."""
    spec = array.spec
    merged = array.merge()
    scenario = scenario_from(spec.location, load)
    groups = group_failures(merged.results)
    shrink_groups(args, scenario, groups, "sim")
    states: dict[str, dict[int, TaskState]] = {}
    unfinished = [
        Unfinished(
            name=f"task {index}",
            seeds=spec.part(index),
            ran=ran,
            why=_why(array, index, states),
            rerun=f"danaus chaos rerun {shown} --task {index}",
        )
        for index, ran in sorted(merged.unfinished.items())
    ]
    spent = sum(result.duration for result in merged.results)
    jobs = ""
    if spec.jobs:  # (none when its tasks were run by hand)
        first, *again = spec.jobs
        jobs = f" of SLURM array job {first}"
        jobs += f" (run again in {', '.join(again)})" if again else ""
    ran_on = (
        f"ran in {counted(spec.tasks, 'task')}{jobs} on "
        f"{', '.join(merged.nodes) or 'no node yet'}; the seeds took {spent:,.1f} s in all"
    )
    report = RunReport(
        scenario=spec.scenario,
        target=spec.target,
        transport="sim",
        seeds=spec.seeds,
        results=merged.results,
        groups=groups,
        elapsed=merged.elapsed,
        unfinished=unfinished,
        ran_on=ran_on,
    )
    return finish(console, args, report)
