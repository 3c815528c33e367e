"""Fixtures for tests that need real worker processes on the tcp transport."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll ``condition`` until true; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.02)


def process_state(pid: int) -> str | None:
    """The state letter of process ``pid`` in ``/proc`` (``S``, ``T``, ``Z``, ...); None if gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return None


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return process_state(pid) not in (None, "Z")


def run_script(
    source: str, tmp_path: Path, timeout: float = 60, **env: str
) -> subprocess.CompletedProcess[str]:
    """Run ``source`` as a controller script in a fresh interpreter."""
    script = tmp_path / "controller.py"
    script.write_text(source)
    return subprocess.run(
        [sys.executable, str(script)],
        cwd=ROOT,
        env={**os.environ, "DANAUS_TRANSPORT": "tcp", **env},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
