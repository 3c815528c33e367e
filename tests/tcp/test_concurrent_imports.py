"""Actors whose classes travel by value import while they are built: several at once on a proc."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.tcp.conftest import ROOT

ROUNDS = 5


def test_actors_built_at_once_import_a_package_with_an_import_cycle_safely():
    """Each round, three actors defined in ``__main__`` are spawned back to back on a fresh
    proc; building them imports a slow package with an import cycle on three threads."""
    result = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "programs" / "concurrent_imports.py"), str(ROUNDS)],
        env={**os.environ, "DANAUS_TRANSPORT": "tcp", "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines() == [f"round {n}: [42, 42, 42]" for n in range(ROUNDS)]
