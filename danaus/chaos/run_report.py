"""The record of one ``danaus chaos run`` over many seeds, for people and for CI.

`RunReport` holds what the run found: how many seeds ran and failed, how fast,
the failing seeds grouped by signature (`danaus.chaos.groups`), and, for a
run spread over a cluster, the parts of it that did not finish (`Unfinished`),
with the command that runs what they left. It is written three ways:
`summary_lines` for the terminal, `to_html` as one self-contained page (inline
CSS and SVG, nothing fetched, so that any page can link to it or a bug report
carry it) with each group's plan and the sequence diagram of its smallest
seed, and `to_junit_xml` for CI systems, one test case per seed.
"""

from __future__ import annotations

import html
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass, field

from danaus.chaos.export import CSS as DIAGRAM_CSS
from danaus.chaos.export import sequence_diagram
from danaus.chaos.groups import Group, seed_list
from danaus.chaos.results import SeedResult
from danaus.chaos.runner import Outcome, replay_command
from danaus.wording import counted

MAX_VIOLATIONS = 10
"""Violations shown per group; the rest are counted."""


@dataclass(frozen=True)
class Unfinished:
    """A part of a run (a task of an array job) that ended before its seeds had all run."""

    name: str
    seeds: range
    ran: int
    """How many of its seeds ran (their results count)."""
    why: str
    """What is known of its end: the scheduler's word, where its log is."""
    rerun: str
    """The command that runs the seeds it left, and merges the run again."""

    def describe(self) -> str:
        return (
            f"{self.name} (seeds {self.seeds.start}:{self.seeds.stop}): {self.ran:,} of "
            f"{len(self.seeds):,} seeds ran; {self.why}"
        )


@dataclass
class RunReport:
    """What a run over many seeds found."""

    scenario: str
    target: str
    """How the command named the scenario (``PATH::NAME``), for replay commands."""
    transport: str
    seeds: range
    results: list[SeedResult]
    """A result for each seed that ran."""
    groups: list[Group]
    elapsed: float
    """Wall-clock seconds for the whole run (here: shrinking included)."""
    unfinished: list[Unfinished] = field(default_factory=list)
    ran_on: str = ""
    """Where the seeds ran, when not in this process (an array job: its id, tasks, nodes)."""

    @property
    def failed(self) -> int:
        return sum(len(group.seeds) for group in self.groups)

    @property
    def not_run(self) -> int:
        return len(self.seeds) - len(self.results)

    @property
    def seeds_per_minute(self) -> float:
        return len(self.results) / self.elapsed * 60 if self.elapsed > 0 else 0.0

    def replay(self, group: Group) -> str:
        """The command that replays ``group``'s smallest seed (with its shrunk plan, if any)."""
        return replay_command(self.target, group.seed, group.shrunk, self.transport)

    def headline(self) -> str:
        """One line: seeds, failures, groups, time and rate."""
        groups = f" in {counted(len(self.groups), 'group')}" if self.groups else ""
        missing = f", {self.not_run:,} not run" if self.not_run else ""
        return (
            f"{self.scenario}: {counted(len(self.results), 'seed')}, {self.failed:,} failed"
            f"{groups}{missing}, {self.elapsed:.1f} s "
            f"({self.seeds_per_minute:,.0f} seeds per minute)"
        )


def summary_lines(report: RunReport) -> list[str]:
    """The end of a run on the terminal: each group's signature, seeds and replay command;
    the parts that did not finish, and how to run what they left."""
    lines = []
    if report.groups:
        lines.append(f"failing seeds by signature ({counted(len(report.groups), 'group')}):")
    for number, group in enumerate(report.groups, 1):
        lines.append(f"  {number}. {counted(len(group.seeds), 'seed')}: {group.signature[0]}")
        lines += [f"     {more}" for more in group.signature[1:]]
        lines.append(f"     smallest seed {group.seed}; seeds {seed_list(group.seeds)}")
        lines.append(f"     replay: {report.replay(group)}")
    if report.unfinished:
        lines.append(f"unfinished ({counted(len(report.unfinished), 'part')}):")
    for part in report.unfinished:
        lines += [f"  {part.describe()}", f"     rerun: {part.rerun}"]
    if report.ran_on:
        lines.append(report.ran_on)
    return [*lines, report.headline()]


CSS = f"""{DIAGRAM_CSS}
h2 {{ font-size: 16px; margin: 28px 0 6px; border-top: 2px solid #d1d5db; padding-top: 12px; }}
h3 {{ font-size: 13px; margin: 12px 0 4px; }}
.signature {{ font: 12px ui-monospace, monospace; color: #b91c1c; }}
pre {{ font: 12px ui-monospace, monospace; background: #f3f4f6; padding: 6px 8px; margin: 4px 0;
       white-space: pre-wrap; max-width: 1200px; }}
.passed {{ color: #059669; font-weight: 600; }}
.failed {{ color: #b91c1c; font-weight: 600; }}
"""


def _figures(report: RunReport) -> str:
    rows = [
        ("scenario", html.escape(report.scenario)),
        ("target", f"<code>{html.escape(report.target)}</code>"),
        ("transport", html.escape(report.transport)),
        ("seeds", f"{report.seeds.start}:{report.seeds.stop} ({len(report.results):,} run)"),
        ("passed", f'<span class="passed">{len(report.results) - report.failed:,}</span>'),
        ("failed", f'<span class="failed">{report.failed:,}</span>'),
        ("groups of failures", f"{len(report.groups):,}"),
        ("wall-clock time", f"{report.elapsed:.1f} s"),
        ("seeds per minute", f"{report.seeds_per_minute:,.0f}"),
    ]
    if report.not_run:
        rows.append(("not run", f'<span class="failed">{report.not_run:,}</span>'))
    if report.ran_on:
        rows.append(("ran on", html.escape(report.ran_on)))
    cells = "".join(f"<tr><th>{name}</th><td>{value}</td></tr>" for name, value in rows)
    return f'<table class="figures">{cells}</table>'


def _group_section(report: RunReport, number: int, group: Group) -> str:
    outcome = group.outcome
    signature = "<br>".join(html.escape(line) for line in group.signature)
    plan_title = (
        f"shrunk plan ({counted(len(group.shrunk), 'fault')}, the smallest that still fails)"
        if group.shrunk is not None
        else f"plan ({counted(len(outcome.plan), 'fault')}; not shrunk)"
    )
    violations = "\n".join(str(v) for v in outcome.violations[:MAX_VIOLATIONS])
    if len(outcome.violations) > MAX_VIOLATIONS:
        violations += f"\n... and {len(outcome.violations) - MAX_VIOLATIONS:,} more"
    diagram = (
        sequence_diagram(outcome.trace.events, ids=f"group{number}")
        if isinstance(outcome, Outcome)
        else "<p>(the run was not kept: shrink it to see its diagram)</p>"
    )
    return (
        f'<section class="group" id="group-{number}" data-seeds="{len(group.seeds)}">\n'
        f"<h2>Group {number}: {counted(len(group.seeds), 'seed')}</h2>\n"
        f'<p class="signature">{signature}</p>\n'
        f"<p>Smallest seed <b>{group.seed}</b>; seeds {html.escape(seed_list(group.seeds, 40))}."
        "</p>\n"
        f"<h3>Replay</h3><pre>{html.escape(report.replay(group))}</pre>\n"
        f"<h3>{html.escape(plan_title)}</h3><pre>{html.escape(outcome.plan.describe())}</pre>\n"
        f"<h3>Violations (seed {group.seed})</h3><pre>{html.escape(violations)}</pre>\n"
        f"<h3>Sequence diagram (seed {group.seed})</h3>\n{diagram}</section>\n"
    )


def _unfinished_section(report: RunReport) -> str:
    items = "".join(
        f"<li>{html.escape(part.describe())}<pre>{html.escape(part.rerun)}</pre></li>"
        for part in report.unfinished
    )
    return f'<section id="unfinished"><h2>Unfinished parts</h2><ul>{items}</ul></section>\n'


def to_html(report: RunReport) -> str:
    """The whole run on one self-contained page: figures, the parts that did not finish, then
    one section per group."""
    title = f"{report.scenario}: chaos run over {counted(len(report.results), 'seed')}"
    if report.groups:
        index = "".join(
            f'<li><a href="#group-{n}">group {n}</a>: {counted(len(g.seeds), "seed")}, '
            f"smallest {g.seed}: {html.escape(g.signature[0])}</li>"
            for n, g in enumerate(report.groups, 1)
        )
        body = f"<ol>{index}</ol>\n" + "".join(
            _group_section(report, n, g) for n, g in enumerate(report.groups, 1)
        )
    else:
        body = '<p class="passed">No seed failed.</p>\n'
    if report.unfinished:
        body = _unfinished_section(report) + body
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{CSS}</style></head><body>\n"
        f"<h1>{html.escape(title)}</h1>\n<p>{html.escape(report.headline())}</p>\n"
        f"{_figures(report)}\n{body}</body></html>\n"
    )


def to_junit_xml(report: RunReport) -> str:
    """The run as JUnit XML: a test suite of one test case per seed, each failure with its
    violations and replay command, and an error case for each part that did not finish."""
    by_seed = {seed: group for group in report.groups for seed in group.seeds}
    suite = ElementTree.Element(
        "testsuite",
        name=report.scenario,
        tests=str(len(report.results) + len(report.unfinished)),
        failures=str(report.failed),
        errors=str(len(report.unfinished)),
        skipped="0",
        time=f"{report.elapsed:.3f}",
    )
    for result in report.results:
        case = ElementTree.SubElement(
            suite,
            "testcase",
            classname=f"chaos.{report.scenario}",
            name=f"seed {result.seed}",
            time=f"{result.duration:.3f}",
        )
        if result.failed:
            group = by_seed[result.seed]
            failure = ElementTree.SubElement(
                case, "failure", message="; ".join(group.signature), type="ChaosFailure"
            )
            command = replay_command(report.target, result.seed, None, report.transport)
            plan = result.plan.describe() if result.plan is not None else "(not kept)"
            failure.text = "\n".join(
                ["plan:", plan, "violations:"]
                + [str(v) for v in result.violations]
                + [f"replay: {command}"]
            )
    for part in report.unfinished:
        case = ElementTree.SubElement(
            suite,
            "testcase",
            classname=f"chaos.{report.scenario}",
            name=f"{part.name} (seeds {part.seeds.start}:{part.seeds.stop})",
            time="0.000",
        )
        error = ElementTree.SubElement(case, "error", message=part.describe(), type="Unfinished")
        error.text = f"rerun: {part.rerun}"
    suites = ElementTree.Element("testsuites")
    suites.append(suite)
    ElementTree.indent(suites)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ElementTree.tostring(
        suites, encoding="unicode"
    )
