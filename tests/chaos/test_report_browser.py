"""A chaos run's HTML report in a real browser: headless Chromium (the system's package, driven
by Playwright, as for the dashboard's tests) opens it, its groups and sequence diagrams
render, and a screenshot of it is kept under ``test-artifacts/`` for people to look at."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The report of a run with two groups of failures, each diagram with messages to draw."""
    path = tmp_path_factory.mktemp("report") / "run.html"
    ran = subprocess.run(
        [
            sys.executable,
            "-m",
            "danaus",
            "chaos",
            "run",
            "tests/chaos/scenarios.py::FailsTwoWays",
            "--seeds",
            "0:30",
            "--quiet",
            "--report",
            str(path),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ran.returncode == 1, ran.stdout + ran.stderr
    return path


def test_the_report_renders_its_figures_groups_and_diagrams(browser: Any, screenshots, report):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    requests: list[str] = []
    page.on("request", lambda request: requests.append(request.url))
    page.goto(report.as_uri())
    assert page.title() == "FailsTwoWays: chaos run over 30 seeds"
    figures = page.locator("table.figures")
    assert figures.is_visible()
    assert "seeds per minute" in figures.inner_text()
    groups = page.locator("section.group")
    assert groups.count() == 2
    for n in range(2):
        group = groups.nth(n)
        assert group.locator("h2").inner_text().startswith(f"Group {n + 1}: ")
        assert "danaus chaos replay" in group.locator("pre").first.inner_text()
        diagram = group.locator("svg.diagram")
        diagram.scroll_into_view_if_needed()
        box = diagram.bounding_box()
        assert box is not None and box["width"] > 400 and box["height"] > 100
        arrows = diagram.locator("g.msg line")
        assert arrows.count() > 0
        first = arrows.first.bounding_box()
        assert first is not None and first["width"] + first["height"] > 0
        assert diagram.locator("line.lifeline").count() >= 2
    assert requests == [page.url]  # self-contained: it fetched nothing but itself
    page.evaluate("window.scrollTo(0, 0)")  # each diagram's sticky heading back at its top
    screenshots(page, "chaos-report")
