"""How procs start: a function each runs first, and a command (with an environment) of its own."""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
from pathlib import Path

import pytest

import danaus
from danaus import Actor, BootstrapCommand, Point, default_bootstrap_cmd, endpoint, this_host


class Environment(Actor):
    @endpoint
    def get(self, *names: str) -> list[str | None]:
        return [os.environ.get(name) for name in names]

    @endpoint
    def parent(self) -> int:
        return os.getppid()

    @endpoint
    def pid(self) -> int:
        return os.getpid()

    @endpoint
    def spawn_on_this_host(self) -> Environment:
        return this_host().spawn_procs().spawn("inner", Environment)


def mark_booted() -> None:
    os.environ["BOOTED"] = f"pid {os.getpid()}"


async def mark_booted_later() -> None:
    await asyncio.sleep(0)
    os.environ["BOOTED"] = "async"


def test_bootstrap_runs_on_each_proc_before_its_actors(tcp):
    tcp()
    procs = this_host().spawn_procs(per_host={"gpus": 2}, bootstrap=mark_booted)
    found = procs.spawn("env", Environment).get.call("BOOTED").get(timeout=60)
    assert len({value for [value] in found.values()}) == 2, "each proc ran it in its own process"
    later = this_host().spawn_procs(bootstrap=mark_booted_later)
    assert later.spawn("env", Environment).get.call_one("BOOTED").get(timeout=60) == ["async"]


def test_each_proc_gets_the_environment_of_its_point(tcp):
    tcp()

    def command(point: Point) -> BootstrapCommand:
        return default_bootstrap_cmd().with_env({"RANK": str(point["gpus"]), "SHARED": "yes"})

    procs = this_host().spawn_procs(per_host={"gpus": 3}, bootstrap_command=command)
    found = procs.spawn("env", Environment).get.call("RANK", "SHARED").get(timeout=60)
    assert list(found.values()) == [["0", "yes"], ["1", "yes"], ["2", "yes"]]


def test_a_wrapper_command_that_execs_the_proc(tcp):
    tcp()
    default = default_bootstrap_cmd()
    wrapper = BootstrapCommand(
        shutil.which("env") or "/usr/bin/env",
        None,
        ["WRAPPED=1", default.program, *default.args],
        {},
    )
    procs = this_host().spawn_procs(per_host={"gpus": 2}, bootstrap_command=wrapper)
    found = procs.spawn("env", Environment).get.call("WRAPPED").get(timeout=60)
    assert list(found.values()) == [["1"], ["1"]]


def wrapper_of_python(folder: Path) -> str:
    """A script that records its own pid in the environment, then runs this Python on."""
    script = folder / "python"
    script.write_text(f'#!/bin/sh\nexport WRAPPER_PID=$$\nexec {sys.executable} "$@"\n')
    script.chmod(0o700)
    return str(script)


def test_with_python_executable_starts_procs_and_their_procs_with_it(tcp, tmp_path):
    tcp()
    hosts = this_host()
    assert not hosts.is_fake_in_process
    procs = hosts.with_python_executable(wrapper_of_python(tmp_path)).spawn_procs({"gpus": 2})
    envs = procs.spawn("env", Environment)
    wrappers = [value for [value] in envs.get.call("WRAPPER_PID").get(timeout=60).values()]
    inner = envs.slice(gpus=0).spawn_on_this_host.call_one().get(timeout=60)
    [inner_wrapper] = inner.get.call_one("WRAPPER_PID").get(timeout=60)
    assert None not in wrappers and len(set(wrappers)) == 2, "each proc ran the wrapper"
    assert inner_wrapper is not None and inner_wrapper not in wrappers, "so did the inner proc"
    plain = this_host().spawn_procs().spawn("env", Environment)
    assert plain.get.call_one("WRAPPER_PID").get(timeout=60) == [None]


def fail_to_boot() -> None:
    raise RuntimeError("no GPU for me")


def test_a_bootstrap_that_raises_fails_the_spawn_with_its_traceback(tcp):
    tcp()
    danaus.unhandled_fault_hook = lambda failure: None
    procs = this_host().spawn_procs(bootstrap=fail_to_boot)
    with pytest.raises(RuntimeError, match="no GPU for me"):
        procs.initialized.get(timeout=60)


def test_a_command_that_cannot_start_is_a_lost_proc(tcp):
    tcp()
    danaus.unhandled_fault_hook = lambda failure: None
    missing = BootstrapCommand("/nonexistent/python")
    procs = this_host().spawn_procs(per_host={"gpus": 2}, bootstrap_command=missing)
    with pytest.raises(RuntimeError, match="could not be started"):
        procs.initialized.get(timeout=60)
    actors = procs.spawn("env", Environment)
    with pytest.raises(danaus.SupervisionError, match="could not be started"):
        actors.get.call("PATH").get(timeout=60)


def test_bootstrap_arguments_are_checked_where_spawn_procs_is_called(tcp):
    tcp()
    with pytest.raises(TypeError, match="bootstrap must be a function"):
        this_host().spawn_procs(bootstrap="setup.sh")
    with pytest.raises(TypeError, match="BootstrapCommand or a function"):
        this_host().spawn_procs(bootstrap_command=["python"])
    with pytest.raises(TypeError, match="returned"):
        this_host().spawn_procs(bootstrap_command=lambda point: "python")
    with pytest.raises(TypeError, match="env must map str to str"):
        BootstrapCommand("python", env={"RANK": 1})
    with pytest.raises(TypeError, match="args must be a list of str"):
        BootstrapCommand("python", args="-m worker")


def test_the_simulator_runs_bootstraps_and_refuses_commands():
    import danaus.sim

    def main() -> tuple[list[str | None], str]:
        procs = this_host().spawn_procs(per_host={"gpus": 2}, bootstrap=mark_booted)
        booted = procs.spawn("env", Environment).get.call("BOOTED").get()
        refused = this_host().spawn_procs(bootstrap_command=default_bootstrap_cmd())
        return [value for [value] in booted.values()], str(refused.initialized.exception())

    booted, refused = danaus.sim.run(main).value
    os.environ.pop("BOOTED", None)
    assert booted == [booted[0]] * 2, "simulated procs share the controller's environment"
    assert "bootstrap_command needs a real transport" in refused


BOOTED_AS: list[int] = []
"""The pids the bootstraps of simulated procs saw (simulated procs share this list)."""


def note_pid() -> None:
    BOOTED_AS.append(os.getpid())


def test_a_bootstrap_on_the_simulator_runs_as_its_proc():
    import danaus.sim

    def main() -> list[int]:
        procs = this_host().spawn_procs(per_host={"gpus": 2}, bootstrap=note_pid)
        return list(procs.spawn("env", Environment).pid.call().get().values())

    BOOTED_AS.clear()
    pids = danaus.sim.run(main).value
    assert pids == BOOTED_AS and len(set(pids)) == 2 and os.getpid() not in pids


def test_on_the_simulator_procs_are_in_process_and_have_no_executable_of_their_own():
    import danaus.sim

    def main() -> tuple[bool, str]:
        hosts = this_host()
        wrapped = hosts.with_python_executable(sys.executable).spawn_procs()
        return hosts.is_fake_in_process, str(wrapped.initialized.exception())

    in_process, refused = danaus.sim.run(main).value
    assert in_process
    assert "bootstrap_command needs a real transport" in refused
