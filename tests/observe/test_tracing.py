"""A real run's trace: the simulator's event types, from every proc, written at shutdown."""

from __future__ import annotations

import json
import subprocess
from collections import Counter

import pytest

from danaus.core import trace as ev
from tests.observe.conftest import PYTHON, program

pytestmark = pytest.mark.timeout(180)

SCRIPT = """
import sys
from danaus import Actor, endpoint, this_host

class Echo(Actor):
    @endpoint
    def echo(self, value: int) -> int:
        return value

first = this_host().spawn_procs(per_host={"gpus": 2})
print(sum(first.spawn("echo", Echo).echo.call(3).get().values()))
first.stop().get()
second = this_host().spawn_procs(per_host={"gpus": 1})
print(second.spawn("echo", Echo).echo.call_one(int(sys.argv[1])).get())
"""


def run(tmp_path, job_env, trace: str) -> subprocess.CompletedProcess[str]:
    script = program(tmp_path, SCRIPT)
    return subprocess.run(
        [PYTHON, "-m", "danaus.cli", "run", "--trace", trace, script, "7"],
        cwd=tmp_path,
        env=job_env,
        capture_output=True,
        text=True,
        timeout=150,
    )


def test_danaus_run_records_every_procs_events_stopped_or_alive(tmp_path, job_env):
    done = run(tmp_path, job_env, "run.jsonl")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["6", "7"]
    events = ev.read(tmp_path / "run.jsonl")
    received = Counter(e.proc for e in events if isinstance(e, ev.CallReceived))
    workers = sorted(p for p in received if p != "root")
    assert len(workers) == 3, received
    spawned = {e.proc for e in events if isinstance(e, ev.Spawn)}
    assert set(workers) <= spawned
    echoes = [e for e in events if isinstance(e, ev.CallSent) and e.method == "echo"]
    assert sorted(e.dst for e in echoes) == workers
    assert [e.t for e in events] == sorted(e.t for e in events)


def test_a_perfetto_trace_has_a_track_per_proc_and_arrows_between_them(tmp_path, job_env):
    done = run(tmp_path, job_env, "run.json")
    assert done.returncode == 0, done.stderr
    trace = json.loads((tmp_path / "run.json").read_text())
    tracks = {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
    assert "root" in tracks and len(tracks) >= 4
    flows = Counter(e["ph"] for e in trace["traceEvents"] if e["ph"] in ("s", "f"))
    assert flows["s"] == flows["f"] > 0


def test_without_the_option_no_trace_is_written(tmp_path, job_env):
    done = subprocess.run(
        [PYTHON, program(tmp_path, SCRIPT), "1"],
        cwd=tmp_path,
        env=job_env,
        capture_output=True,
        text=True,
        timeout=150,
    )
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["jobs", "program.py"]
