"""Fixtures for the observability tests: programs run in their own interpreters."""

from __future__ import annotations

import os
import sys
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
