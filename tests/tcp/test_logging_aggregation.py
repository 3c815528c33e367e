"""logging_option on real procs: the controller's terminal stays readable at 64 procs."""

from __future__ import annotations

import pytest

from tests.tcp.conftest import run_script

SCRIPT = """
import danaus
from danaus import Actor, current_rank, endpoint, this_host

# 64 procs starting at once on a small machine: lenient heartbeats (not what is tested here).
danaus.configure(transport="tcp", heartbeat_timeout=30.0)

class Talker(Actor):
    @endpoint
    def talk(self, step: int) -> None:
        print(f"loading shard {step}", flush=True)
        print(f"rank {current_rank().rank} ready", flush=True)

procs = this_host().spawn_procs({"gpus": 64})
if AGGREGATE:
    procs.logging_option(stream_to_client=True, aggregate_window_sec=60).get()
talkers = procs.spawn("talkers", Talker)
talkers.talk.call(7).get()
procs.stop().get()
print("DONE", flush=True)
"""


@pytest.mark.timeout(600)
def test_identical_lines_of_64_procs_show_once_with_their_count(tmp_path):
    result = run_script("AGGREGATE = True\n" + SCRIPT, tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines.count("[64 similar log lines] [talkers] loading shard 7") == 1
    assert not any(line.endswith("] loading shard 7") and "similar" not in line for line in lines)
    assert sorted(line for line in lines if line.endswith(" ready")) == sorted(
        f"[talkers gpus={i}] rank {i} ready" for i in range(64)
    )
    # The window (60 s) did not have to pass: the procs' exit wrote what was held.
    assert lines[-1] == "DONE"


@pytest.mark.timeout(600)
def test_without_aggregation_every_line_shows(tmp_path):
    result = run_script("AGGREGATE = False\n" + SCRIPT, tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr
    shards = [line for line in result.stdout.splitlines() if line.endswith("loading shard 7")]
    assert sorted(shards) == sorted(f"[talkers gpus={i}] loading shard 7" for i in range(64))
