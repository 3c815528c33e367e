"""LocalJob: workers as local processes, found again from another process by the CLI."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest

import danaus
from danaus import Actor, endpoint
from danaus.job import JobNotApplied, LocalJob, load
from tests.multihost.conftest import ROOT
from tests.tcp.conftest import alive


class Rank(Actor):
    @endpoint
    def pid(self) -> int:
        return os.getpid()


def danaus_cli(*args: str, cwd=ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "danaus.cli", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


def test_apply_state_kill(tmp_path):
    job = LocalJob({"trainers": 2, "generators": 1}, directory=tmp_path / "job")
    job.apply()
    workers = [w["pid"] for ws in job.running["workers"].values() for w in ws]
    try:
        job.apply()
        assert [w["pid"] for ws in job.running["workers"].values() for w in ws] == workers
        assert stat.S_IMODE(job.key_file.stat().st_mode) == 0o600
        key = job.key_file.read_text().strip()
        for pid in workers:
            with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                assert key.encode() not in cmdline.read()
        danaus.configure(transport="tcp")
        state = load(job.directory).state()
        assert state.trainers.sizes == {"hosts": 2}
        assert state.generators.sizes == {"hosts": 1}
        pids = state.trainers.spawn_procs(per_host={"gpus": 2}).spawn("r", Rank).pid.call()
        procs = list(pids.get(timeout=120).values())
        with pytest.raises(AttributeError, match=r"no mesh 'evaluators'.*\['generators', 'tr"):
            _ = state.evaluators
    finally:
        danaus.shutdown()
        job.kill()
    assert not [pid for pid in workers + procs if alive(pid)]
    with pytest.raises(JobNotApplied, match="has not been applied"):
        job.state()
    with pytest.raises(JobNotApplied, match="no job in"):
        load(job.directory)


def test_the_cli_applies_shows_and_kills_a_job_across_processes(tmp_path):
    (tmp_path / "jobs.py").write_text(
        "from danaus.job import LocalJob\n"
        "job = LocalJob({'trainers': 2}, directory='job')\n"
    )
    applied = danaus_cli("job", "apply", "jobs.py::job", cwd=tmp_path)
    assert applied.returncode == 0, applied.stderr
    workers = [w["pid"] for w in load(tmp_path / "job").running["workers"]["trainers"]]
    shown = danaus_cli("job", "state", "--dir", str(tmp_path / "job"))
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("trainers: 2 hosts, attached: tcp://127.0.0.1:")
    killed = danaus_cli("job", "kill", "--dir", str(tmp_path / "job"))
    assert killed.returncode == 0, killed.stderr
    assert not [pid for pid in workers if alive(pid)]
    again = danaus_cli("job", "kill", "--dir", str(tmp_path / "job"))
    assert again.returncode == 1
    assert "no job in" in again.stderr


def test_bad_input_is_refused(tmp_path):
    with pytest.raises(ValueError, match="needs meshes"):
        LocalJob({})
    with pytest.raises(ValueError, match="positive number of hosts"):
        LocalJob({"trainers": True})
    (tmp_path / "jobs.py").write_text("job = 3\n")
    refused = danaus_cli("job", "apply", "jobs.py::job", cwd=tmp_path)
    assert refused.returncode == 2
    assert "is not a danaus.job.Job" in refused.stderr
