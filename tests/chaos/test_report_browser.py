"""A chaos run's HTML report in a real browser: headless Chromium (the system's package, driven
by Playwright) opens it, its groups and sequence diagrams render, and screenshots of it are
kept under ``test-artifacts/`` for people to look at."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

sync_api = pytest.importorskip("playwright.sync_api", reason="needs playwright: make install")
if not CHROMIUM.exists():
    pytest.skip(
        f"needs Chromium at {CHROMIUM} (Debian's chromium: make system-deps)",
        allow_module_level=True,
    )


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The report of a run of two groups of failures, each diagram with messages to draw."""
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


@pytest.fixture(scope="module")
def requests() -> list[str]:
    """Every URL the page asked for."""
    return []


@pytest.fixture(scope="module")
def page(report: Path, requests: list[str]):
    """The report, open in the system's Chromium (Playwright never downloads a browser here)."""
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, timeout=60_000
        )
        try:
            view = browser.new_page(viewport={"width": 1400, "height": 1000})
            view.on("request", lambda request: requests.append(request.url))
            view.goto(report.as_uri())
            yield view
        finally:
            browser.close()


def test_the_report_opens_with_its_figures_and_groups(page, requests):
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
    # Self-contained: the page fetched nothing but itself.
    assert requests == [page.url]
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "chaos-report.png"), full_page=False)


def test_each_groups_sequence_diagram_renders(page):
    diagrams = page.locator("section.group svg.diagram")
    assert diagrams.count() == 2
    for n in range(2):
        diagram = diagrams.nth(n)
        diagram.scroll_into_view_if_needed()
        box = diagram.bounding_box()
        assert box is not None and box["width"] > 400 and box["height"] > 100
        arrows = diagram.locator("g.msg line")
        assert arrows.count() > 0
        first = arrows.first.bounding_box()
        assert first is not None and first["width"] + first["height"] > 0
        lifelines = diagram.locator("line.lifeline")
        assert lifelines.count() >= 2
        group = page.locator("section.group").nth(n)
        group.screenshot(path=str(ARTIFACTS / f"chaos-report-group-{n + 1}.png"))

