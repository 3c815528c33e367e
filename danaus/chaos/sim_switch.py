"""``pytest --danaus-sim --danaus-seeds 0:20``: an existing test suite on the simulator, per seed.

Every test runs on the simulator once per schedule seed, within its own test
item: its function-scoped fixtures are set up and torn down for each seed,
and it passes only if it passes on every seed. Node ids do not change, so
selections, ``-k``, ``--lf`` and tools that track tests by id work as before.

For each seed, the environment says what every simulated world made during
the test must do: ``DANAUS_TRANSPORT=sim`` (for the whole session) and
``DANAUS_SCHEDULE_SEED`` (see `danaus.transports.sim.schedule`), which
subprocesses inherit too. A world made during a test is shut down at its end,
so each seed starts from a fresh world; a world made by a wider fixture is
left alone (and keeps the seed it was made with). A test's own timeout
(pytest-timeout) counts each seed separately.

A test's reports give the time it took over all its seeds, so that
``--durations`` and tools reading the reports see what it cost. A failing test
reports the seeds it failed on and, for the first, the one command that
replays it. With ``--danaus-traces DIR``, the traces of each
failing seed's simulated worlds are written under ``DIR`` as JSON lines, an
HTML sequence diagram and a Perfetto timeline (`danaus.chaos.export`).
"""

from __future__ import annotations

import logging
import os
import re
import shlex
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from _pytest.runner import runtestprotocol

from danaus.chaos.export import write_html, write_perfetto
from danaus.core import config
from danaus.core import trace as trace_events
from danaus.core.settings import variable
from danaus.transports.sim import route_asyncio_run

log = logging.getLogger("danaus.sim")


@dataclass
class SeedFailure:
    """One test that failed on some seeds."""

    nodeid: str
    seeds: list[int]
    replay: str
    pictures: list[Path] = field(default_factory=list)


DEFAULT_SCHEDULE = "danaus_default_schedule"
"""The marker of a test that checks what the default schedule (seed 0) does, exactly."""


def replay_command(nodeid: str, seed: int, traces: Path | None = None) -> str:
    """The command that runs ``nodeid`` on seed ``seed`` alone."""
    words = ["pytest", "--danaus-sim", "--danaus-seeds", str(seed)]
    if traces is not None:
        words += ["--danaus-traces", str(traces)]
    return shlex.join([*words, nodeid])


@contextmanager
def _environment(name: str, value: str | None) -> Iterator[None]:
    saved = os.environ.get(name)
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = saved


def _folder_name(nodeid: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", nodeid).strip("_")[:150]


def render_traces(folder: Path) -> list[Path]:
    """An HTML page and a Perfetto file next to each trace (JSON lines) in ``folder``."""
    pictures = []
    for lines in sorted(folder.glob("*.jsonl")):
        events = trace_events.read(lines)
        title = f"{folder.parent.name} {lines.stem}"
        html, perfetto = lines.with_suffix(".html"), lines.with_suffix(".perfetto.json")
        write_html(events, html, title=title)
        write_perfetto(events, perfetto)
        pictures += [html, perfetto]
    return pictures


class SimSwitch:
    """The pytest plugin object of ``--danaus-sim`` (registered only when it is given)."""

    def __init__(self, seeds: range, traces: Path | None) -> None:
        self.seeds = seeds
        self.traces = traces
        self.failures: list[SeedFailure] = []
        self.tests = 0

    def pytest_configure(self, config: pytest.Config) -> None:
        os.environ[variable("transport")] = "sim"
        # A test's first use of Danaus may come inside asyncio.run: its loop must be the
        # simulator's already, as importing danaus routes nothing.
        route_asyncio_run()

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> bool:
        ihook = item.ihook
        ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
        failed: list[int] = []
        first_failure: list[pytest.TestReport] | None = None
        last: list[pytest.TestReport] = []
        pictures: list[Path] = []
        spent: dict[str, float] = {}
        pinned = item.get_closest_marker(DEFAULT_SCHEDULE) is not None
        for index, seed in enumerate(range(1) if pinned else self.seeds):
            if index:
                _restart_timeout(item)
            last, seed_pictures = self._run_seed(item, nextitem, seed)
            for report in last:
                spent[report.when] = spent.get(report.when, 0.0) + report.duration
            if any(r.failed for r in last):
                failed.append(seed)
                pictures += seed_pictures
                first_failure = first_failure or last
            elif any(r.skipped for r in last):
                break
        self.tests += 1
        kept = first_failure or last
        if failed:
            self._report_failure(item, kept, failed, pictures)
        for report in kept:
            # What the phase cost over every seed, for --durations, JUnit XML and wrappers.
            report.duration = spent[report.when]
            ihook.pytest_runtest_logreport(report=report)
        ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
        return True

    def _run_seed(
        self, item: pytest.Item, nextitem: pytest.Item | None, seed: int
    ) -> tuple[list[pytest.TestReport], list[Path]]:
        """Run the test once on ``seed``; shut down the worlds it made; save its traces if asked."""
        folder = None
        if self.traces is not None:
            folder = self.traces / _folder_name(item.nodeid) / f"seed{seed}"
            shutil.rmtree(folder, ignore_errors=True)
        before = config.installed()
        with (
            _environment(variable("schedule_seed"), str(seed)),
            _environment(variable("trace_dir"), None if folder is None else str(folder)),
        ):
            reports = runtestprotocol(item, nextitem=nextitem, log=False)
            if config.installed() not in (None, before):
                try:
                    config.shutdown()
                except Exception:
                    log.exception("shutting down the simulated world of %s failed", item.nodeid)
        pictures: list[Path] = []
        if folder is not None and folder.exists():
            if any(r.failed for r in reports):
                pictures = render_traces(folder)
            else:
                shutil.rmtree(folder)
        return reports, pictures

    def _report_failure(
        self,
        item: pytest.Item,
        reports: list[pytest.TestReport],
        failed: list[int],
        pictures: list[Path],
    ) -> None:
        replay = replay_command(item.nodeid, failed[0])
        lines = [
            f"failed on schedule seed{'s' if len(failed) > 1 else ''} "
            f"{', '.join(map(str, failed))} of {_describe(self.seeds)}",
            f"replay seed {failed[0]}: {replay}",
        ]
        if pictures:
            lines += ["trace pictures:", *(f"  {p}" for p in pictures)]
        else:
            folder = self.traces or Path("danaus-traces")
            lines.append(f"its traces: {replay_command(item.nodeid, failed[0], folder)}")
        for report in reports:
            if report.failed:
                report.sections.append(("danaus simulator", "\n".join(lines)))
        self.failures.append(SeedFailure(item.nodeid, failed, replay, pictures))

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        write = terminalreporter.write_line
        terminalreporter.section("danaus simulator")
        passed = self.tests - len(self.failures)
        tests = "1 test" if self.tests == 1 else f"{self.tests} tests"
        write(
            f"{tests} ran on schedule seeds {_describe(self.seeds)}: "
            f"{passed} passed on every seed, {len(self.failures)} failed on some"
        )
        for failure in self.failures:
            seeds = ", ".join(map(str, failure.seeds))
            write(f"{failure.nodeid}: seeds {seeds}; replay: {failure.replay}")


def _describe(seeds: range) -> str:
    return f"{seeds.start}:{seeds.stop}" if len(seeds) > 1 else str(seeds.start)


def _restart_timeout(item: pytest.Item) -> None:
    """Give the next seed the test's whole timeout, if pytest-timeout times the test."""
    if not item.config.pluginmanager.hasplugin("timeout"):
        return
    import pytest_timeout

    settings_of = getattr(pytest_timeout, "_get_item_settings", None)
    if settings_of is None:  # another version of pytest-timeout: its timer spans all seeds
        return
    settings = settings_of(item)
    if settings.timeout and settings.timeout > 0 and not settings.func_only:
        hooks = item.config.pluginmanager.hook
        hooks.pytest_timeout_cancel_timer(item=item)
        hooks.pytest_timeout_set_timer(item=item, settings=settings)
