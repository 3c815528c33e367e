"""UCX is shut down before the process exits, and a process runs one job after another on it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("ucxx")

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import ucxx.core
import danaus
from danaus import Actor, endpoint, this_host
from danaus.core import config

class Echo(Actor):
    @endpoint
    def echo(self, value):
        return value

for job in range(2):
    danaus.configure(transport="ucx")
    config.current_world().transport.data.ucx().listening().result(30)  # UCX starts on demand
    mesh = this_host().spawn_procs(per_host={"w": 2}).spawn("echo", Echo)
    assert list(mesh.echo.call(job).get(timeout=60).values()) == [job, job]
    large = bytes(1 << 20)
    assert all(v == large for v in mesh.echo.call(large).get(timeout=60).values())
    danaus.shutdown()
    print("context after job", job, "kept:", ucxx.core._ctx is not None)
"""


def test_jobs_share_ucx_and_the_controller_shuts_it_down_before_it_exits(tmp_path):
    script = tmp_path / "controller.py"
    script.write_text(SCRIPT)
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "DANAUS_UCX_BULK": "ucx"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "context after job 1 kept: True" in done.stdout
    assert "could not be shut down" not in done.stderr
    assert "Assertion" not in done.stderr
