"""Fixtures for the observability tests: programs run in their own interpreters."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def job_env(tmp_path: Path) -> dict[str, str]:
    """The environment of a program and of the tools that look at it: a private jobs directory."""
    return {
        **os.environ,
        "DANAUS_JOBS_DIR": str(tmp_path / "jobs"),
        "DANAUS_TRANSPORT": "tcp",
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "PYTHONUNBUFFERED": "1",
    }


def program(tmp_path: Path, source: str, name: str = "program.py") -> str:
    """Write ``source`` to a file; its path."""
    path = tmp_path / name
    path.write_text(source)
    return str(path)


PYTHON = sys.executable


@pytest.fixture
def tcp_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tcp: Callable[..., object]
) -> Callable[..., object]:
    """A tcp world in this process whose job file goes to a private directory; shut down after."""
    monkeypatch.setenv("DANAUS_JOBS_DIR", str(tmp_path / "jobs"))
    return tcp


def wait_for(condition, timeout: float, what: str):
    """Poll ``condition`` until it returns something true; that value. Fails after ``timeout``."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        found = condition()
        if found:
            return found
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)
