"""A controller that fails ends with its report and traceback whole, each cause said once.

The case of a worker holding another job's key: the host cannot be attached, the
failure reaches the controller unhandled, and the controller exits while its main
thread raises the same failure from the call it waited on.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from danaus import make_job_key
from tests.tcp.conftest import wait_until

ROOT = Path(__file__).resolve().parents[2]
CAUSE = "the worker refused this controller's key"
RUNS = 4


@pytest.fixture
def worker(tmp_path: Path) -> Iterator[str]:
    """A worker of another job (another key) listening on loopback; its address."""
    address = tmp_path / "address"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "danaus",
            "worker",
            "--listen",
            "127.0.0.1:0",
            "--address-file",
            str(address),
        ],
        env={**os.environ, "DANAUS_JOB_KEY": make_job_key()},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until(lambda: address.exists() and address.read_text().strip() != "", 60, "worker")
        yield address.read_text().strip()
    finally:
        process.kill()
        process.wait(10)


def test_the_report_and_traceback_are_whole_and_say_each_cause_once(worker):
    env = {
        **os.environ,
        "DANAUS_TRANSPORT": "tcp",
        "DANAUS_WORKERS": worker,
        "DANAUS_JOB_KEY": make_job_key(),
    }
    for _ in range(RUNS):
        ran = subprocess.run(
            [sys.executable, str(ROOT / "examples" / "getting_started.py")],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert ran.returncode == 1, ran.stderr
        report, _, traceback = ran.stderr.partition("Traceback (most recent call last):\n")
        # The report: a heading, the failed actor and its cause, the failed member.
        heading = report.index("danaus: unhandled failure; the controller exits\n")
        lines = report[heading:].splitlines()
        assert lines[1].startswith("The actor __main__.Trainer trainers"), ran.stderr
        assert lines[2].startswith("mesh 'trainers' rank hosts=0, gpus=0"), ran.stderr
        assert report.count(CAUSE) == 1, ran.stderr
        if traceback:  # printed whole, ending with the exception, which says the cause once
            *frames, last = traceback.rstrip("\n").splitlines()
            assert frames and all(line.startswith("  ") for line in frames), ran.stderr
            assert last.startswith("danaus.core.errors.SupervisionError: Endpoint call "), last
            assert last.count(CAUSE) == 1, last
            assert last.endswith("(proc root:1.0 on host " + worker + ")"), last
