"""Remote debugging: breakpoint() in actors on real procs, attached from `danaus debug`."""

from __future__ import annotations

import re

import pexpect
import pytest

from tests.observe.conftest import PYTHON, program, wait_for

pytestmark = pytest.mark.timeout(180)

TRAINERS = """
from danaus import Actor, current_rank, endpoint, this_host

class Trainer(Actor):
    @endpoint
    def step(self, base: int) -> int:
        loss = base + current_rank().rank
        breakpoint()
        return loss * 10

procs = this_host().spawn_procs(per_host={"gpus": 2})
trainers = procs.spawn("trainer", Trainer)
print("result:", sorted(trainers.step.call(4).get().values()), flush=True)
input()  # the job stays up until the test is done with it
"""

PROMPT = "danaus debug> "


def spawn(args: list[str], env: dict[str, str]) -> pexpect.spawn:
    return pexpect.spawn(PYTHON, args, env=env, encoding="utf-8", timeout=60)


def test_two_stopped_ranks_are_listed_attached_inspected_and_continued(tmp_path, job_env):
    job = spawn([program(tmp_path, TRAINERS)], job_env)
    debug = None
    try:
        job.expect("stopped at breakpoint")
        job.expect("stopped at breakpoint")
        debug = spawn(["-m", "danaus.cli", "debug"], job_env)
        debug.expect(PROMPT)
        debug.sendline("list")
        debug.expect(PROMPT)
        stopped = {
            int(rank): int(session)
            for session, rank in re.findall(r"(\d+)\s+trainer\s+gpus=(\d)\s", debug.before)
        }
        assert sorted(stopped) == [0, 1]
        for rank, session in sorted(stopped.items()):
            debug.sendline(f"attach {session}")
            debug.expect(r"-> return loss \* 10")
            debug.expect_exact("(Pdb) ")
            debug.sendline("p loss")
            debug.expect_exact(f"{4 + rank}\r\n(Pdb) ")
            debug.sendline("continue")
            debug.expect_exact(f"session {session} ended: the rank runs on")
            debug.expect(PROMPT)
        job.expect_exact("result: [40, 50]")
        debug.sendline("list")
        debug.expect_exact("no rank is stopped at breakpoint()")
        debug.sendline("quit")
        debug.expect(pexpect.EOF)
        job.sendline("")
        job.expect(pexpect.EOF)
        job.close()
        assert job.exitstatus == 0
    finally:
        for child in (job, debug):
            if child is not None and child.isalive():
                child.terminate(force=True)


SIMULATED = """
from danaus import Actor, endpoint, this_host

class Trainer(Actor):
    @endpoint
    def step(self, base: int) -> int:
        loss = base + 1
        breakpoint()
        return loss * 10

def main():
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    return procs.spawn("trainer", Trainer).step.call_one(4).get()
"""


def test_on_the_simulator_breakpoint_is_plain_pdb_in_the_process(tmp_path, job_env):
    sim = spawn(["-m", "danaus.cli", "sim", f"{program(tmp_path, SIMULATED)}::main"], job_env)
    try:
        sim.expect(r"-> return loss \* 10")
        sim.expect_exact("(Pdb) ")
        sim.sendline("p loss")
        sim.expect_exact("5\r\n(Pdb) ")
        sim.sendline("c")
        sim.expect_exact("result: 50")
        sim.expect(pexpect.EOF)
    finally:
        if sim.isalive():
            sim.terminate(force=True)


def test_the_controller_can_debug_its_own_stopped_ranks(tcp_job):
    import io

    import danaus.debug
    from danaus import this_host

    world = tcp_job()
    namespace: dict = {"__name__": "trainers_under_test"}
    exec(TRAINERS.split("procs = ")[0], namespace)
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    pending = procs.spawn("trainer", namespace["Trainer"]).step.call(4)
    wait_for(lambda: len(world.admin.sessions.views()) == 2, 60, "both ranks to stop")
    typed = io.StringIO("list\nattach 1\np loss * 2\nwhere\ncontinue\nlist\ncontinue\nquit\n")
    shown = io.StringIO()
    assert danaus.debug.attach(typed, shown) == 0
    assert sorted(pending.get(timeout=60).values()) == [40, 50]
    text = shown.getvalue()
    assert re.search(r"^\(Pdb\) (8|10)$", text, re.MULTILINE)
    assert "session 1 ended: the rank runs on" in text and "1 rank continued" in text
    where = text[text.index("(Pdb) ") :]
    assert where.count("<string>(9)step()") == 1
    assert "danaus/core" not in where and "threading.py" not in where
