"""Workers forked from the launcher's fork server behave as workers started as new interpreters."""

from __future__ import annotations

import atexit
import os
import signal
import subprocess
import sys

import pytest

import danaus
from danaus import Actor, SupervisionError, endpoint, this_host
from danaus.transports.tcp.allocator import proc_environment
from tests.conformance.test_supervision import record_root_failures
from tests.tcp.conftest import run_script, wait_until


class Process(Actor):
    """Tells what its process sees, and leaves a mark when its interpreter ends."""

    def __init__(self, mark: str | None = None) -> None:
        self.mark = mark

    @endpoint
    def parent(self) -> int:
        return os.getppid()

    @endpoint
    def variable(self, name: str) -> str | None:
        return os.environ.get(name)

    @endpoint
    def importer(self, module: str) -> int | None:
        """The pid of the process that imported ``module`` here, if it has been imported."""
        found = sys.modules.get(module)
        return None if found is None else found.IMPORTED_BY

    @endpoint
    def mark_at_exit(self, path: str) -> None:
        atexit.register(_write, f"{path}.atexit")
        self.mark = f"{path}.del"

    def __del__(self) -> None:
        if self.mark is not None:
            _write(self.mark)


def _write(path: str) -> None:
    with open(path, "w") as file:
        file.write("done")


def test_procs_are_forked_by_one_server_and_see_a_changed_environment(tcp, monkeypatch):
    tcp()
    first = this_host().spawn_procs({"w": 2}).spawn("p", Process)
    parents = set(first.parent.call().get(timeout=30).values())
    assert len(parents) == 1 and parents != {os.getpid()}
    monkeypatch.setenv("DANAUS_TEST_FORK_SERVER", "changed")
    second = this_host().spawn_procs({"w": 1}).spawn("p", Process)
    assert second.variable.call_one("DANAUS_TEST_FORK_SERVER").get(timeout=30) == "changed"
    assert second.parent.call_one().get(timeout=30) == os.getpid()


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("PYTEST_CURRENT_TEST", "tests/x.py::test_other (call)"),
        # torch sets it when its compiler's configuration loads (the tensor engine makes it)
        ("TORCHINDUCTOR_CACHE_DIR", "/tmp/torchinductor_test"),
    ],
)
def test_a_changed_volatile_variable_keeps_the_server_and_reaches_its_children(
    tcp, monkeypatch, name, value
):
    tcp()
    monkeypatch.delenv(name, raising=False)
    first = this_host().spawn_procs({"w": 1}).spawn("p", Process)
    server = first.parent.call_one().get(timeout=30)
    monkeypatch.setenv(name, value)
    second = this_host().spawn_procs({"w": 1}).spawn("p", Process)
    assert second.parent.call_one().get(timeout=30) == server
    assert second.variable.call_one(name).get(timeout=30) == value
    monkeypatch.delenv(name)
    third = this_host().spawn_procs({"w": 1}).spawn("p", Process)
    assert third.parent.call_one().get(timeout=30) == server
    assert third.variable.call_one(name).get(timeout=30) is None


def test_preloaded_modules_are_imported_by_the_server_before_it_forks(tcp):
    tcp(preload=["tests.tcp.preloaded"])
    procs = this_host().spawn_procs({"w": 2}).spawn("p", Process)
    servers = set(procs.parent.call().get(timeout=30).values())
    importers = set(procs.importer.call("tests.tcp.preloaded").get(timeout=30).values())
    assert len(servers) == 1 and importers == servers


class Torch(Actor):
    @endpoint
    def compute(self) -> tuple[int, float]:
        import torch

        a = torch.ones(512, 512)
        return os.getppid(), (a @ a).sum().item() + torch.ones(4_000_000).sum().item()


def test_procs_forked_after_torch_was_preloaded_run_its_parallel_code(tcp):
    tcp(preload=["torch"])
    answers = this_host().spawn_procs({"w": 2}).spawn("t", Torch).compute.call().get(timeout=60)
    (server, _), *_ = answers.values()
    assert server != os.getpid()
    assert set(answers.values()) == {(server, 512.0**3 + 4_000_000)}


def test_without_preload_a_worker_imports_only_what_its_code_needs(tcp):
    tcp()
    proc = this_host().spawn_procs({"w": 1}).spawn("p", Process)
    assert proc.importer.call_one("tests.tcp.preloaded").get(timeout=30) is None


RARELY_NEEDED = """
import sys

from danaus import Actor, endpoint, this_host


class Imports(Actor):
    @endpoint
    def which(self, names: list[str]) -> list[str]:
        return [name for name in names if name in sys.modules]


found = this_host().spawn_procs().spawn("i", Imports).which.call_one(["psutil", "tempfile"])
print("imported", *found.get(timeout=30), flush=True)
"""


def test_a_worker_starts_without_modules_that_only_rare_questions_need(tmp_path):
    """psutil tells whether a silent process still runs, and whether a launcher's host has
    memory for more procs; tempfile writes a new job key. A proc needs none of them to serve
    its actors (whose code here imports nothing), and its fork server, on the way of a
    program's first procs, does not import them for every worker."""
    result = run_script(RARELY_NEEDED, tmp_path, DANAUS_PRELOAD="")  # the suite preloads pytest
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("imported", 1)[1].split() == []


def test_a_module_that_cannot_be_preloaded_is_reported_and_procs_still_start(tmp_path):
    result = run_script(PRELOAD_FAILS, tmp_path, DANAUS_PRELOAD="tests.tcp.no_such_module, json")
    assert result.returncode == 0, result.stderr
    assert "answered 1" in result.stdout
    assert "could not preload tests.tcp.no_such_module" in result.stderr


@pytest.mark.parametrize(
    ("preload", "error"),
    [(["bad name"], ValueError), (["tests..preloaded"], ValueError), ("json", TypeError)],
)
def test_preload_names_modules(preload, error):
    with pytest.raises(error, match="preload"):
        danaus.configure(transport="tcp", preload=preload)


PRELOAD_FAILS = """
import danaus
from danaus import Actor, endpoint, this_host

class One(Actor):
    @endpoint
    def one(self) -> int:
        return 1

danaus.configure(transport="tcp")
print("answered", this_host().spawn_procs().spawn("o", One).one.call_one().get(timeout=30))
danaus.shutdown()
"""


def test_a_preloaded_module_that_configures_danaus_starts_no_server_of_its_own(tmp_path):
    """``configure(transport="tcp")`` starts a fork server ahead; in a fork server, whose
    preloads may call it, it must not, or each server would start the next."""
    marks = tmp_path / "marks"
    result = run_script(
        PRELOAD_FAILS,
        tmp_path,
        DANAUS_PRELOAD="tests.tcp.configures",
        DANAUS_TEST_MARKS=str(marks),
    )
    assert result.returncode == 0, result.stderr
    assert "answered 1" in result.stdout
    assert len(marks.read_text().split()) == 1, "the preload was imported by a second server"


def test_a_forked_proc_finalizes_its_interpreter_when_stopped(tcp, tmp_path):
    tcp()
    procs = this_host().spawn_procs({"w": 1})
    procs.spawn("p", Process).mark_at_exit.call_one(str(tmp_path / "mark")).get(timeout=30)
    procs.stop().get(timeout=30)
    assert (tmp_path / "mark.atexit").read_text() == "done"
    assert (tmp_path / "mark.del").read_text() == "done"


def test_procs_of_a_lost_fork_server_are_lost_and_later_procs_still_start(tcp):
    tcp()
    failures = record_root_failures()
    first = this_host().spawn_procs({"w": 1}).spawn("p", Process)
    server = first.parent.call_one().get(timeout=30)
    os.kill(server, signal.SIGKILL)
    assert failures.recv().get(timeout=30).signal == signal.SIGKILL
    with pytest.raises(SupervisionError):
        first.parent.call_one().get(timeout=30)
    second = this_host().spawn_procs({"w": 1}).spawn("p", Process)
    assert second.parent.call_one().get(timeout=30) == os.getpid()
    wait_until(lambda: not os.path.exists(f"/proc/{server}"), 10, "the fork server to be reaped")


def test_log_handlers_made_before_the_worker_started_are_prefixed_too():
    """A module the fork server imported may have bound a handler to the unprefixed stderr."""
    source = (
        "import logging, sys\n"
        "early = logging.getLogger('early')\n"
        "early.addHandler(logging.StreamHandler(sys.__stderr__))\n"
        "early.propagate = False\n"
        "from danaus.transports.tcp import output\n"
        "output.install('p0', 'INFO')\n"
        "early.warning('made on import')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", source], capture_output=True, text=True, timeout=60, check=True
    )
    assert "[proc p0] made on import" in result.stderr


TWO_WORLDS = """
import os
import danaus
from danaus import Actor, endpoint, this_host

class Parent(Actor):
    @endpoint
    def parent(self) -> int:
        return os.getppid()

servers = []
for test in ("first", "second"):
    os.environ["PYTEST_CURRENT_TEST"] = test  # a test runner changes it between worlds
    danaus.configure(transport="tcp")
    servers.append(this_host().spawn_procs().spawn("p", Parent).parent.call_one().get(timeout=30))
    danaus.shutdown()
print("servers", *servers, flush=True)
"""


def test_worlds_made_one_after_another_fork_from_one_server_which_ends_with_the_process(
    tmp_path,
):
    result = run_script(TWO_WORLDS, tmp_path)
    assert result.returncode == 0, result.stderr
    first, second = map(int, result.stdout.split("servers", 1)[1].split())
    assert first == second, "the second world started a fork server of its own"
    wait_until(lambda: not os.path.exists(f"/proc/{first}"), 10, "the fork server to end")


AHEAD = """
import os
import sys

import psutil

import danaus
from danaus import Actor, endpoint

SERVER_MODULE = "danaus.transports.tcp.forker"
started_after_world = []


def audit(event, args):
    if event == "subprocess.Popen" and SERVER_MODULE in map(str, args[1] or ()):
        started_after_world.append("danaus.transports.tcp.world" in sys.modules)


sys.addaudithook(audit)


class Parent(Actor):
    @endpoint
    def parent(self) -> int:
        return os.getppid()


def servers():
    return [child.pid for child in psutil.Process().children() if SERVER_MODULE in child.cmdline()]


if {configure}:
    danaus.configure(transport="tcp")
    print("configured", *servers(), flush=True)
host = danaus.this_host()
print("ahead", *servers(), flush=True)
print("started-after-world", *started_after_world, flush=True)
print("forked-by", host.spawn_procs().spawn("p", Parent).parent.call_one().get(timeout=30))
"""


@pytest.mark.parametrize("configure", [True, False], ids=["configure", "this_host"])
def test_the_controller_starts_its_fork_server_before_its_transport_and_forks_its_first_procs_there(
    tmp_path, configure
):
    """The server's imports run while the program goes on (importing the transport's code, the
    rest of the program), not after its first ``spawn_procs``: ``configure`` starts it, else
    the making of the world, before the world's code is imported."""
    result = run_script(AHEAD.format(configure=configure), tmp_path)
    assert result.returncode == 0, result.stderr
    lines = {
        label: rest.split()
        for label, _, rest in (line.partition(" ") for line in result.stdout.splitlines())
    }
    ahead = lines["ahead"]
    assert len(ahead) == 1, "no fork server was started with the world"
    if configure:
        assert lines["configured"] == ahead, "configure() started no fork server"
    assert lines["started-after-world"] == ["False"], "the server waited for the world's code"
    assert lines["forked-by"] == ahead


def test_procs_set_up_their_allocator_unless_their_environment_says_otherwise(tcp, monkeypatch):
    tcp()
    monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
    forked = this_host().spawn_procs({"w": 1}).spawn("p", Process)
    assert forked.variable.call_one("GLIBC_TUNABLES").get(timeout=30) == (
        "glibc.malloc.hugetlb=1:glibc.malloc.mmap_threshold=33554432"
        ":glibc.malloc.trim_threshold=67108864"
    )
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.hugetlb=0:glibc.malloc.trim_threshold=0")
    started = this_host().spawn_procs({"w": 1}).spawn("p", Process)
    assert started.parent.call_one().get(timeout=30) == os.getpid()
    assert started.variable.call_one("GLIBC_TUNABLES").get(timeout=30) == (
        "glibc.malloc.hugetlb=0:glibc.malloc.trim_threshold=0:glibc.malloc.mmap_threshold=33554432"
    )


def test_other_allocator_tunables_are_kept():
    tunables = proc_environment({"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"})["GLIBC_TUNABLES"]
    assert tunables.split(":")[:2] == ["glibc.malloc.arena_max=2", "glibc.malloc.hugetlb=1"]
