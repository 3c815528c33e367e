"""The record of one ``danaus chaos run`` over many seeds, for people and for CI.

`RunReport` holds what the run found: how many seeds ran and failed, how fast,
and the failing seeds grouped by signature (`danaus.chaos.groups`). It is
written three ways: `summary_lines` for the terminal, `to_html` as one
self-contained page (inline CSS and SVG, nothing fetched, so that any page can
link to it or a bug report carry it) with each group's plan and the sequence
diagram of its smallest seed, and `to_junit_xml` for CI systems, one test case
per seed.
"""

from __future__ import annotations

import html
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass, field

from danaus.chaos.export import CSS as DIAGRAM_CSS
from danaus.chaos.export import sequence_diagram
from danaus.chaos.groups import Group, seed_list
from danaus.chaos.runner import Outcome, replay_command
from danaus.wording import counted

MAX_VIOLATIONS = 10
"""Violations shown per group; the rest are counted."""


@dataclass
class RunReport:
    """What a run over many seeds found."""

    scenario: str
    target: str
    """How the command named the scenario (``PATH::NAME``), for replay commands."""
    transport: str
    seeds: range
    outcomes: list[Outcome]
    groups: list[Group]
    elapsed: float
    """Wall-clock seconds for the whole run, shrinking included."""
    durations: dict[int, float] = field(default_factory=dict)
    """Wall-clock seconds of each seed's run."""

    @property
    def failed(self) -> int:
        return sum(len(group.seeds) for group in self.groups)

    @property
    def seeds_per_minute(self) -> float:
        return len(self.outcomes) / self.elapsed * 60 if self.elapsed > 0 else 0.0

    def replay(self, group: Group) -> str:
        """The command that replays ``group``'s smallest seed (with its shrunk plan, if any)."""
        return replay_command(self.target, group.seed, group.shrunk, self.transport)

    def headline(self) -> str:
        """One line: seeds, failures, groups, time and rate."""
        groups = f" in {counted(len(self.groups), 'group')}" if self.groups else ""
        return (
            f"{self.scenario}: {counted(len(self.outcomes), 'seed')}, {self.failed:,} failed"
            f"{groups}, {self.elapsed:.1f} s ({self.seeds_per_minute:,.0f} seeds per minute)"
        )


def summary_lines(report: RunReport) -> list[str]:
    """The end of a run on the terminal: each group's signature, seeds and replay command."""
    if not report.groups:
        return [report.headline()]
    lines = [f"failing seeds by signature ({counted(len(report.groups), 'group')}):"]
    for number, group in enumerate(report.groups, 1):
        lines.append(f"  {number}. {counted(len(group.seeds), 'seed')}: {group.signature[0]}")
        lines += [f"     {more}" for more in group.signature[1:]]
        lines.append(f"     smallest seed {group.seed}; seeds {seed_list(group.seeds)}")
        lines.append(f"     replay: {report.replay(group)}")
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
        ("seeds", f"{report.seeds.start}:{report.seeds.stop} ({len(report.outcomes):,} run)"),
        ("passed", f'<span class="passed">{len(report.outcomes) - report.failed:,}</span>'),
        ("failed", f'<span class="failed">{report.failed:,}</span>'),
        ("groups of failures", f"{len(report.groups):,}"),
        ("wall-clock time", f"{report.elapsed:.1f} s"),
        ("seeds per minute", f"{report.seeds_per_minute:,.0f}"),
    ]
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
    diagram = sequence_diagram(outcome.trace.events, ids=f"group{number}")
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


def to_html(report: RunReport) -> str:
    """The whole run on one self-contained page: figures, then one section per group."""
    title = f"{report.scenario}: chaos run over {counted(len(report.outcomes), 'seed')}"
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
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{CSS}</style></head><body>\n"
        f"<h1>{html.escape(title)}</h1>\n<p>{html.escape(report.headline())}</p>\n"
        f"{_figures(report)}\n{body}</body></html>\n"
    )


def to_junit_xml(report: RunReport) -> str:
    """The run as JUnit XML: a test suite of one test case per seed, each failure with its
    violations and replay command."""
    by_seed = {seed: group for group in report.groups for seed in group.seeds}
    suite = ElementTree.Element(
        "testsuite",
        name=report.scenario,
        tests=str(len(report.outcomes)),
        failures=str(report.failed),
        errors="0",
        skipped="0",
        time=f"{report.elapsed:.3f}",
    )
    for outcome in report.outcomes:
        case = ElementTree.SubElement(
            suite,
            "testcase",
            classname=f"chaos.{report.scenario}",
            name=f"seed {outcome.seed}",
            time=f"{report.durations.get(outcome.seed, 0.0):.3f}",
        )
        if outcome.failed:
            group = by_seed[outcome.seed]
            failure = ElementTree.SubElement(
                case, "failure", message="; ".join(group.signature), type="ChaosFailure"
            )
            command = replay_command(report.target, outcome.seed, None, report.transport)
            failure.text = "\n".join(
                ["plan:", outcome.plan.describe(), "violations:"]
                + [str(v) for v in outcome.violations]
                + [f"replay: {command}"]
            )
    suites = ElementTree.Element("testsuites")
    suites.append(suite)
    ElementTree.indent(suites)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ElementTree.tostring(
        suites, encoding="unicode"
    )

