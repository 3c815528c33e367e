"""``danaus chaos run`` and ``danaus chaos replay``: many seeds, and one seed exactly again.

``run`` runs the seeds here, or with ``--slurm-array`` over the tasks of a
SLURM array job (`danaus.chaos.array_cli`, which also gives ``merge`` and
``rerun``); either way it ends the same: each group of failures with its
smallest seed and replay command, and the reports asked for.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from danaus.argparsing import TRACE_HELP, UsageError, fraction, positive_int
from danaus.chaos.groups import Group, group_failures
from danaus.chaos.plan import Plan
from danaus.chaos.results import SeedResult
from danaus.chaos.run_report import RunReport, summary_lines, to_html, to_junit_xml
from danaus.chaos.runner import (
    iter_seeds,
    run_scenario,
    seed_range,
    shrink,
)
from danaus.chaos.scenario import Scenario
from danaus.core.config import TRANSPORTS
from danaus.progress import wanted
from danaus.wording import counted

SHOWN_VIOLATIONS = 10
PROGRESS = (
    TextColumn("{task.description}"),
    BarColumn(),
    MofNCompleteColumn(),
    TextColumn("seeds, failed: {task.fields[failed]}, elapsed"),
    TimeElapsedColumn(),
    TextColumn("left"),
    TimeRemainingColumn(),
)
"""The progress bar of a run: "KVStore ━━━━ 3/10 seeds, failed: 1, elapsed 0:00:02 left 0:00:05"."""


def add_report_options(command: Any) -> None:
    """The options of how a run ends: shrinking, and the reports it writes."""
    command.add_argument(
        "--shrink",
        action="store_true",
        help="shrink the plan of each group's smallest seed to the fewest faults that still fail",
    )
    command.add_argument("--quiet", action="store_true", help="no progress bar")
    command.add_argument(
        "--report",
        metavar="FILE",
        help="write the run as one self-contained HTML page: figures, and for each group of "
        "failures its shrunk plan and the sequence diagram of its smallest seed "
        "(implies --shrink)",
    )
    command.add_argument(
        "--junit-xml", metavar="FILE", help="write the run as JUnit XML, a test case per seed"
    )


def add_commands(commands: Any, load: Callable[[str], Any], command: Callable[..., Any]) -> None:
    """Register ``chaos run``, ``replay``, ``merge`` and ``rerun`` under the ``danaus``
    command; ``command`` makes a sub-command that runs a handler (`danaus.cli`)."""
    from danaus.chaos import array_cli

    chaos = commands.add_parser("chaos", help="run scenarios under faults, replay a seed")
    verbs = chaos.add_subparsers(dest="verb", required=True, metavar="ACTION")

    run = command(
        verbs, "run", lambda args: _run(args, load), help="run a scenario over many seeds"
    )
    run.add_argument("target", help="PATH.py::NAME or module::NAME, a Scenario subclass")
    run.add_argument("--seeds", default="0:100", help="START:STOP (STOP excluded), or one seed N")
    run.add_argument(
        "--determinism",
        type=fraction,
        default=0.05,
        metavar="RATE",
        help="fraction of seeds run twice to check their traces match (simulator only)",
    )
    run.add_argument("--transport", default="sim", choices=TRANSPORTS, help="where to run")
    add_report_options(run)
    slurm = run.add_argument_group("on a SLURM cluster")
    slurm.add_argument(
        "--slurm-array",
        type=positive_int,
        metavar="TASKS",
        help="split the seeds over the tasks of a SLURM array job, wait for it and merge what "
        "they found (simulator only)",
    )
    array_cli.add_slurm_options(slurm)

    replay = command(
        verbs,
        "replay",
        lambda args: _replay(args, load),
        help="run one seed again, exactly, and keep its trace",
    )
    replay.add_argument("target", help="PATH.py::NAME or module::NAME, a Scenario subclass")
    replay.add_argument("--seed", type=int, required=True, help="the seed to run")
    replay.add_argument(
        "--plan", help="a plan as JSON (from a shrunk failure's replay command), or @FILE"
    )
    replay.add_argument("--transport", default="sim", choices=TRANSPORTS, help="where to run")
    replay.add_argument("--trace", metavar="FILE", action="append", default=[], help=TRACE_HELP)
    array_cli.add_commands(verbs, load, command)


def scenario_from(target: str, load: Callable[[str], Any]) -> Scenario:
    """The scenario ``target`` names (`UsageError` if it names something else)."""
    found = load(target)
    if isinstance(found, type) and issubclass(found, Scenario):
        return found()
    if isinstance(found, Scenario):
        return found
    what = f"the class {found.__name__}" if isinstance(found, type) else f"a {type(found).__name__}"
    raise UsageError(
        f"{target} is {what}, not a scenario: name a subclass of danaus.chaos.Scenario"
    )


def _plan(text: str) -> Plan:
    if text.startswith("@"):
        try:
            text = Path(text[1:]).read_text()
        except OSError as exc:
            raise UsageError(f"--plan: cannot read {text[1:]}: {exc.strerror}") from None
    try:
        return Plan.from_json(text)
    except ValueError as exc:
        raise UsageError(f"--plan: {exc}") from None


def _print_failure(console: Console, report: RunReport, group: Group) -> None:
    """The smallest seed of a group: its plan, what broke, and how to replay it."""
    outcome = group.outcome
    others = len(group.seeds) - 1
    alike = f"; {counted(others, 'other seed')} failed this way" if others else ""
    console.print(
        f"[bold red]seed {outcome.seed} failed[/] "
        f"({counted(len(outcome.violations), 'violation')}{alike})"
    )
    console.print("  shrunk plan:" if group.shrunk is not None else "  plan:")
    plan = outcome.plan.describe() if outcome.plan is not None else "(not kept)"
    for line in plan.splitlines():
        console.print(f"    {line}", markup=False, highlight=False)
    console.print("  violations:")
    for violation in outcome.violations[:SHOWN_VIOLATIONS]:
        first, *rest = str(violation).splitlines()
        console.print(f"    {first}", markup=False, highlight=False)
        for line in rest[-3:]:
            console.print(f"      {line}", markup=False, highlight=False)
    if len(outcome.violations) > SHOWN_VIOLATIONS:
        console.print(f"    ... and {len(outcome.violations) - SHOWN_VIOLATIONS:,} more")
    command = report.replay(group)
    console.print(f"  replay: {command}", markup=False, highlight=False, soft_wrap=True)


def shrink_groups(
    args: argparse.Namespace, scenario: Scenario, groups: list[Group], transport: str
) -> None:
    """With ``--shrink`` or ``--report``: each group's smallest seed, run again with the smallest
    plan that still fails (kept with its trace, for the report's diagram)."""
    if not (args.shrink or args.report):
        return
    for group in groups:
        plan = group.outcome.plan
        assert plan is not None, "a failing seed keeps its plan"
        group.shrunk, group.outcome = shrink(scenario, group.seed, plan, transport)


def finish(console: Console, args: argparse.Namespace, report: RunReport) -> int:
    """End a run: each group, the reports asked for, the summary; the exit status (1: a seed
    failed or did not run)."""
    for group in report.groups:
        _print_failure(console, report, group)
    if args.report:
        Path(args.report).write_text(to_html(report), encoding="utf-8")
        console.print(f"report: {args.report}", markup=False, highlight=False)
    if args.junit_xml:
        Path(args.junit_xml).write_text(to_junit_xml(report), encoding="utf-8")
        console.print(f"JUnit XML: {args.junit_xml}", markup=False, highlight=False)
    for line in summary_lines(report):
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    return 1 if report.groups or report.not_run else 0


def progress_bar(console: Console, args: argparse.Namespace) -> Progress:
    """The bar of a run over many seeds (none with ``--quiet``, or off a terminal)."""
    shown = not args.quiet and wanted(console.file)
    return Progress(*PROGRESS, console=console, disable=not shown, transient=True)


def _run(args: argparse.Namespace, load: Callable[[str], Any]) -> int:
    try:
        seeds = seed_range(args.seeds)
    except ValueError as exc:
        raise UsageError(f"--seeds: {exc}") from None
    console = Console()
    scenario = scenario_from(args.target, load)
    if args.slurm_array is not None:
        from danaus.chaos import array_cli

        return array_cli.run(console, args, load, scenario, seeds)
    started = time.perf_counter()
    results: list[SeedResult] = []
    failed = 0
    with progress_bar(console, args) as progress:
        task = progress.add_task(scenario.name, total=len(seeds), failed=0)
        last = time.perf_counter()
        for outcome in iter_seeds(
            scenario, seeds, determinism_rate=args.determinism, transport=args.transport
        ):
            now = time.perf_counter()
            results.append(SeedResult.of(outcome, now - last))
            last = now
            failed += outcome.failed
            progress.update(task, advance=1, failed=failed)
    groups = group_failures(results)
    shrink_groups(args, scenario, groups, args.transport)
    report = RunReport(
        scenario=scenario.name,
        target=args.target,
        transport=args.transport,
        seeds=seeds,
        results=results,
        groups=groups,
        elapsed=time.perf_counter() - started,
    )
    return finish(console, args, report)


def _replay(args: argparse.Namespace, load: Callable[[str], Any]) -> int:
    from danaus.tracing import write

    plan = _plan(args.plan) if args.plan else None
    console = Console()
    scenario = scenario_from(args.target, load)
    outcome = run_scenario(scenario, args.seed, plan, args.transport)
    console.print(f"{scenario.name} seed {args.seed}: {'FAILED' if outcome.failed else 'passed'}")
    console.print("plan:", markup=False)
    console.print(outcome.plan.describe(), markup=False, highlight=False)
    for violation in outcome.violations:
        console.print(str(violation), markup=False, highlight=False)
    for skipped in outcome.skipped:
        console.print(f"skipped: {skipped}", markup=False, highlight=False)
    for path in args.trace:
        write(outcome.trace.events, path, f"{scenario.name} seed {args.seed}")
    console.print(f"trace digest: {outcome.digest}")
    return 1 if outcome.failed else 0
