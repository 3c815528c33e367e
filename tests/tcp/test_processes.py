"""Worker processes: started lean, logged with prefixes, never left behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

from danaus import Actor, endpoint, this_host
from tests.tcp.conftest import ROOT, alive, run_script, wait_until

PIDS_SCRIPT = """
import json, os, sys, threading
from danaus import Actor, endpoint, this_host

class Pid(Actor):
    @endpoint
    def pid(self):
        return os.getpid()

procs = this_host().spawn_procs(per_host={"gpus": 3})
pids = procs.spawn("pids", Pid).pid.call().get()
print(json.dumps(sorted(pids.values())), flush=True)
if sys.argv[-1] == "wait":
    threading.Event().wait()
"""


def test_sigkill_of_the_controller_leaves_no_worker(tmp_path):
    script = tmp_path / "controller.py"
    script.write_text(PIDS_SCRIPT)
    controller = subprocess.Popen(
        [sys.executable, str(script), "wait"],
        cwd=ROOT,
        env={**os.environ, "DANAUS_TRANSPORT": "tcp"},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        pids = json.loads(controller.stdout.readline())
        assert len(pids) == 3 and all(alive(p) for p in pids)
        controller.send_signal(signal.SIGKILL)
        controller.wait(timeout=10)
        wait_until(lambda: not any(alive(p) for p in pids), 10, "workers to exit")
    finally:
        controller.kill()
        controller.stdout.close()


def test_controller_exit_without_stop_leaves_no_worker(tmp_path):
    result = run_script(PIDS_SCRIPT, tmp_path)
    assert result.returncode == 0, result.stderr
    pids = json.loads(result.stdout.splitlines()[-1])
    wait_until(lambda: not any(alive(p) for p in pids), 10, "workers to exit")


class Pid(Actor):
    @endpoint
    def pid(self) -> int:
        return os.getpid()

    @endpoint
    def modules(self) -> list[str]:
        return sorted(m for m in ("torch", "numpy", "danaus.transports.sim") if m in sys.modules)


def test_stop_ends_the_worker_processes(tcp):
    tcp()
    procs = this_host().spawn_procs({"gpus": 2})
    pids = list(procs.spawn("p", Pid).pid.call().get().values())
    assert all(alive(p) for p in pids)
    procs.stop().get(timeout=30)
    wait_until(lambda: not any(alive(p) for p in pids), 10, "workers to exit")


def test_workers_import_nothing_heavy(tcp):
    tcp()
    assert this_host().spawn_procs().spawn("p", Pid).modules.call_one().get() == []


def test_classes_defined_in_main_run_in_workers(tmp_path):
    result = run_script(
        """
from danaus import Actor, endpoint, this_host

def helper(x):
    return x * 3

class Local(Actor):
    @endpoint
    def triple(self, x):
        return helper(x)

mesh = this_host().spawn_procs({"gpus": 2}).spawn("local", Local)
print(list(mesh.triple.call(5).get().values()))
""",
        tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "[15, 15]"


def test_worker_output_reaches_the_controller_prefixed(tmp_path):
    result = run_script(
        """
import logging, sys
from danaus import Actor, endpoint, this_host

class Talker(Actor):
    @endpoint
    def talk(self):
        print("hello from stdout")
        print("to stderr", file=sys.stderr)
        logging.getLogger("talker").warning("a log record")

mesh = this_host().spawn_procs({"gpus": 2}).spawn("talkers", Talker)
mesh.talk.call().get()
mesh.stop().get()
""",
        tmp_path,
    )
    assert result.returncode == 0, result.stderr
    for rank in (0, 1):
        assert f"[talkers gpus={rank}] hello from stdout" in result.stdout
        assert f"[talkers gpus={rank}] to stderr" in result.stderr
        actor = f"<root>.<__main__.Talker talkers{{'gpus': {rank}/2}}>"
        logged = f"[talkers gpus={rank}] WARNING talker: [actor={actor}] a log record"
        assert logged in result.stderr
