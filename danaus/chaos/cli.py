"""``danaus chaos run`` and ``danaus chaos replay``: many seeds, and one seed exactly again."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from danaus.chaos.plan import Plan
from danaus.chaos.runner import (
    Outcome,
    replay_command,
    run_scenario,
    run_seeds,
    seed_range,
    shrink,
)
from danaus.chaos.scenario import Scenario
from danaus.progress import wanted


def add_commands(commands: Any, load: Callable[[str], Any]) -> None:
    """Register ``chaos run`` and ``chaos replay`` under the ``danaus`` command."""
    chaos = commands.add_parser("chaos", help="run scenarios under faults, replay a seed")
    verbs = chaos.add_subparsers(dest="verb", required=True)

    run = verbs.add_parser("run", help="run a scenario over many seeds")
    run.add_argument("target", help="PATH::Scenario (a Scenario subclass)")
    run.add_argument("--seeds", default="0:100", help="START:STOP (stop excluded), default 0:100")
    run.add_argument(
        "--determinism",
        type=float,
        default=0.05,
        metavar="RATE",
        help="fraction of seeds run twice to check their traces match (default 0.05)",
    )
    run.add_argument("--shrink", action="store_true", help="shrink each failing seed's plan")
    run.add_argument("--transport", default="sim", help="sim (default) or a real transport")
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    run.set_defaults(handler=lambda args: _run(args, load))

    replay = verbs.add_parser("replay", help="run one seed again, exactly, and keep its trace")
    replay.add_argument("target", help="PATH::Scenario")
    replay.add_argument("--seed", type=int, required=True)
    replay.add_argument("--plan", help="a plan as JSON (from a shrunk failure), or @FILE")
    replay.add_argument("--transport", default="sim")
    replay.add_argument("--trace", help="write the trace as JSON lines to this file")
    replay.add_argument("--perfetto", help="write a Perfetto/Chrome trace to this file")
    replay.add_argument("--html", help="write an HTML sequence diagram to this file")
    replay.set_defaults(handler=lambda args: _replay(args, load))


def _scenario(target: str, load: Callable[[str], Any]) -> Scenario:
    found = load(target)
    scenario = found() if isinstance(found, type) else found
    if not isinstance(scenario, Scenario):
        raise SystemExit(f"{target} is not a danaus.chaos.Scenario")
    return scenario


def _report(console: Console, target: str, outcome: Outcome, plan: Plan | None = None) -> None:
    console.print(f"[bold red]seed {outcome.seed} failed[/] ({len(outcome.violations)} violations)")
    console.print("  plan:")
    for line in outcome.plan.describe().splitlines():
        console.print(f"    {line}", markup=False, highlight=False)
    console.print("  violations:")
    for violation in outcome.violations[:10]:
        first, *rest = str(violation).splitlines()
        console.print(f"    {first}", markup=False, highlight=False)
        for line in rest[-3:]:
            console.print(f"      {line}", markup=False, highlight=False)
    if len(outcome.violations) > 10:
        console.print(f"    ... and {len(outcome.violations) - 10} more")
    command = replay_command(target, outcome.seed, plan, outcome.transport)
    console.print(f"  replay: {command}", markup=False, highlight=False, soft_wrap=True)


def _run(args: argparse.Namespace, load: Callable[[str], Any]) -> int:
    console = Console()
    scenario = _scenario(args.target, load)
    try:
        seeds = seed_range(args.seeds)
    except ValueError as exc:
        raise SystemExit(f"--seeds: {exc}") from None
    started = time.perf_counter()
    failures: list[Outcome] = []
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("failed: {task.fields[failed]}"),
        TimeRemainingColumn(),
    )
    shown = not args.quiet and wanted(console.file)
    with Progress(*columns, console=console, disable=not shown, transient=True) as progress:
        task = progress.add_task(scenario.name, total=len(seeds), failed=0)

        def advance(outcome: Outcome) -> None:
            if outcome.failed:
                failures.append(outcome)
            progress.update(task, advance=1, failed=len(failures))

        run_seeds(
            scenario,
            seeds,
            determinism_rate=args.determinism,
            transport=args.transport,
            progress=advance,
        )
    for outcome in failures:
        plan = None
        if args.shrink:
            plan, outcome = shrink(scenario, outcome.seed, outcome.plan, args.transport)
        _report(console, args.target, outcome, plan)
    elapsed = time.perf_counter() - started
    console.print(
        f"{scenario.name}: {len(seeds)} seeds, {len(failures)} failed, "
        f"{elapsed:.1f} s ({len(seeds) / elapsed * 60:.0f} seeds per minute)"
    )
    return 1 if failures else 0


def _replay(args: argparse.Namespace, load: Callable[[str], Any]) -> int:
    console = Console()
    scenario = _scenario(args.target, load)
    plan = None
    if args.plan:
        text = Path(args.plan[1:]).read_text() if args.plan.startswith("@") else args.plan
        plan = Plan.from_json(text)
    outcome = run_scenario(scenario, args.seed, plan, args.transport)
    console.print(f"{scenario.name} seed {args.seed}: {'FAILED' if outcome.failed else 'passed'}")
    console.print("plan:", markup=False)
    console.print(outcome.plan.describe(), markup=False, highlight=False)
    for violation in outcome.violations:
        console.print(str(violation), markup=False, highlight=False)
    for skipped in outcome.skipped:
        console.print(f"skipped: {skipped}", markup=False, highlight=False)
    if args.trace:
        outcome.trace.write(args.trace)
    if args.perfetto or args.html:
        from danaus.chaos.export import write_html, write_perfetto

        if args.perfetto:
            write_perfetto(outcome.trace.events, args.perfetto)
        if args.html:
            write_html(outcome.trace.events, args.html, f"{scenario.name} seed {args.seed}")
    console.print(f"trace digest: {outcome.digest}")
    return 1 if outcome.failed else 0
