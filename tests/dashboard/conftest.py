"""Fixtures for the dashboard's tests: a headless Chromium driven by Playwright, screenshots
kept as artifacts, and a dashboard served in this process."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from headless_chromium import CHROMIUM, CHROMIUM_ARGS

from danaus.dashboard.launch import Served, serve
from danaus.dashboard.sources import Source
from tests.observe.conftest import job_env  # noqa: F401 (a fixture: a job's private jobs folder)

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
"""Where screenshots are copied for people and CI to look at (git-ignored)."""
REQUIRED = "DANAUS_BROWSER_TESTS"
"""Set to ``required`` (CI does) to fail, rather than skip, where there is no browser."""


@pytest.fixture
def browser() -> Iterator[Any]:
    """Debian's Chromium, headless, under Playwright (which never downloads a browser here)."""
    missing = None
    if not os.access(CHROMIUM, os.X_OK):
        missing = f"{CHROMIUM} is missing: `make system-deps` installs it (as root)"
    else:
        try:
            from playwright.sync_api import sync_playwright
        except ImportError:
            missing = "Playwright is missing: `make install` installs it"
    if missing is not None:
        if os.environ.get(REQUIRED) == "required":
            pytest.fail(f"the browser tests must run, but {missing}")
        pytest.skip(missing)
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def screenshots(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[Any, str], Path]:
    """``save(page, name)``: a full-page PNG in the test's directory, copied under
    ``test-artifacts/<test>/``."""
    folder = ARTIFACTS / re.sub(r"[^\w.-]+", "_", request.node.name)
    shutil.rmtree(folder, ignore_errors=True)

    def save(page: Any, name: str) -> Path:
        path = tmp_path / f"{name}.png"
        page.screenshot(path=str(path), full_page=True)
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, folder / path.name)
        return path

    return save


class Server:
    """A dashboard served by an event loop on a thread of this process."""

    def __init__(self, source: Source, **options: Any) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        self.served: Served = self.call(serve(source, **options))

    def call(self, coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(30)

    def close(self) -> None:
        self.call(self.served.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()


@pytest.fixture
def served() -> Iterator[Callable[..., Server]]:
    """``start(source, **options)``: a dashboard of ``source``, closed after the test."""
    servers: list[Server] = []

    def start(source: Source, **options: Any) -> Server:
        servers.append(Server(source, **options))
        return servers[-1]

    yield start
    for server in servers:
        server.close()
