"""``danaus chaos run`` and ``danaus chaos replay``: many seeds, and one seed exactly again."""

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

from danaus.argparsing import TRACE_HELP, UsageError, fraction
from danaus.chaos.groups import Group, group_failures
from danaus.chaos.plan import Plan
from danaus.chaos.run_report import RunReport, summary_lines, to_html, to_junit_xml
from danaus.chaos.runner import (
    Outcome,
    run_scenario,
    run_seeds,
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


def add_commands(commands: Any, load: Callable[[str], Any], command: Callable[..., Any]) -> None:
    """Register ``chaos run`` and ``chaos replay`` under the ``danaus`` command; ``command``
    makes a sub-command that runs a handler (`danaus.cli`)."""
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
    run.add_argument(
        "--shrink",
        action="store_true",
        help="shrink the plan of each group's smallest seed to the fewest faults that still fail",
    )
    run.add_argument("--transport", default="sim", choices=TRANSPORTS, help="where to run")
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    run.add_argument(
        "--report",
        metavar="FILE",
        help="write the run as one self-contained HTML page: figures, and for each group of "
        "failures its shrunk plan and the sequence diagram of its smallest seed "
        "(implies --shrink)",
    )
    run.add_argument(
        "--junit-xml", metavar="FILE", help="write the run as JUnit XML, a test case per seed"
    )

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


def _scenario(target: str, load: Callable[[str], Any]) -> Scenario:
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
    for line in outcome.plan.describe().splitlines():
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


def _run(args: argparse.Namespace, load: Callable[[str], Any]) -> int:
    try:
        seeds = seed_range(args.seeds)
    except ValueError as exc:
        raise UsageError(f"--seeds: {exc}") from None
    console = Console()
    scenario = _scenario(args.target, load)
    started = time.perf_counter()
    durations: dict[int, float] = {}
    failed = 0
    shown = not args.quiet and wanted(console.file)
    with Progress(*PROGRESS, console=console, disable=not shown, transient=True) as progress:
        task = progress.add_task(scenario.name, total=len(seeds), failed=0)
        last = time.perf_counter()

        def advance(outcome: Outcome) -> None:
            nonlocal failed, last
            now = time.perf_counter()
            durations[outcome.seed], last = now - last, now
            failed += outcome.failed
            progress.update(task, advance=1, failed=failed)

        outcomes = run_seeds(
            scenario,
            seeds,
            determinism_rate=args.determinism,
            transport=args.transport,
            progress=advance,
        )
    groups = group_failures(outcomes)
    if args.shrink or args.report:
        for group in groups:
            group.shrunk, group.outcome = shrink(
                scenario, group.seed, group.outcome.plan, args.transport
            )
    report = RunReport(
        scenario=scenario.name,
        target=args.target,
        transport=args.transport,
        seeds=seeds,
        outcomes=outcomes,
        groups=groups,
        elapsed=time.perf_counter() - started,
        durations=durations,
    )
    for group in groups:
        _print_failure(console, report, group)
    if args.report:
        Path(args.report).write_text(to_html(report), encoding="utf-8")
        console.print(f"report: {args.report}", markup=False, highlight=False)
    if args.junit_xml:
        Path(args.junit_xml).write_text(to_junit_xml(report), encoding="utf-8")
        console.print(f"JUnit XML: {args.junit_xml}", markup=False, highlight=False)
    for line in summary_lines(report):
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    return 1 if groups else 0


def _replay(args: argparse.Namespace, load: Callable[[str], Any]) -> int:
    from danaus.tracing import write

    plan = _plan(args.plan) if args.plan else None
    console = Console()
    scenario = _scenario(args.target, load)
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
