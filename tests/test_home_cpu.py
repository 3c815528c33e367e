"""Home CPUs: a proc's runtime loop thread stays on one CPU, and its other threads wait there."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import danaus
from danaus import Actor, endpoint, this_host
from danaus.core import home_cpu

pytestmark = [
    pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="Linux only"),
    pytest.mark.timeout(120),
]

CPUS = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
several_cpus = pytest.mark.skipif(len(CPUS) < 2, reason="needs two CPUs to tell a pin apart")


@pytest.fixture
def clean_home(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The module's state as a process that never settled has it, before and after."""
    monkeypatch.setattr(home_cpu, "_home", None)
    monkeypatch.setattr(home_cpu, "_free", None)
    yield


def _on_thread(fn: Callable[[], Any]) -> Any:
    """``fn()`` on a thread of its own (a pin stays on that thread); its result."""
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(fn()))
    thread.start()
    thread.join(30)
    assert out, "the thread did not finish"
    return out[0]


def test_each_proc_has_a_cpu_of_its_own_while_there_are_cpus_left() -> None:
    homes = [home_cpu.home_for(index) for index in range(len(CPUS))]
    assert sorted(homes) == CPUS
    assert home_cpu.home_for(len(CPUS)) is None


@several_cpus
def test_a_settled_thread_stays_home_and_the_threads_it_starts_get_every_cpu_back(
    clean_home: None,
) -> None:
    home = CPUS[-1]

    def settle_and_start() -> tuple[set[int], set[int], set[int]]:
        home_cpu.settle(home)
        inherited = _on_thread(lambda: os.sched_getaffinity(0))

        def freed() -> set[int]:
            home_cpu.free_thread()
            return os.sched_getaffinity(0)

        return os.sched_getaffinity(0), inherited, _on_thread(freed)

    settled, inherited, freed = _on_thread(settle_and_start)
    assert settled == {home}
    assert inherited == {home}
    assert freed == set(CPUS)


@several_cpus
def test_a_thread_waits_at_home_and_has_its_own_cpus_back_once_woken(
    clean_home: None,
) -> None:
    home = CPUS[-1]
    _on_thread(lambda: home_cpu.settle(home))

    def wait_and_wake() -> tuple[set[int], set[int]]:
        during = home_cpu.wait_at_home(lambda: os.sched_getaffinity(0))
        return during, os.sched_getaffinity(0)

    assert _on_thread(wait_and_wake) == ({home}, set(CPUS))


def test_a_cpu_that_cannot_be_had_leaves_the_thread_unpinned(
    clean_home: None, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="danaus.home_cpu")
    before = _on_thread(lambda: (home_cpu.settle(10_000), os.sched_getaffinity(0))[1])
    assert before == set(CPUS)
    assert home_cpu.wait_at_home(lambda: "waited") == "waited"
    assert "stays unpinned" in caplog.text


class Where(Actor):
    """Reports where its proc's threads may run."""

    @endpoint
    def masks(self) -> tuple[int, set[int], set[int]]:
        """This proc's id, its runtime loop thread's CPUs, and those of this endpoint's thread."""
        return os.getpid(), os.sched_getaffinity(os.getpid()), os.sched_getaffinity(0)


def _runtime_thread_cpus() -> set[int]:
    """The CPUs of the controller's runtime loop thread (``danaus-runtime``)."""
    thread = next(t for t in threading.enumerate() if t.name == "danaus-runtime")
    assert thread.native_id is not None
    return os.sched_getaffinity(thread.native_id)


@several_cpus
def test_each_proc_waits_at_a_cpu_of_its_own_while_there_are_cpus_left() -> None:
    """The controller and the first procs each have a home; the proc past the CPUs has none."""
    danaus.configure(transport="tcp")
    try:
        procs = this_host().spawn_procs(per_host={"gpus": len(CPUS)})
        reports = procs.spawn("where", Where).masks.call().get(timeout=60)
        main_thread_cpus = os.sched_getaffinity(0)
        runtime_cpus = _runtime_thread_cpus()
    finally:
        danaus.shutdown()
    runtimes = [runtime for _, runtime, _ in reports.values()]
    homes = sorted(min(runtime) for runtime in runtimes if len(runtime) == 1)
    assert runtime_cpus == {home_cpu.home_for(0)}
    assert homes == sorted(home_cpu.home_for(index) for index in range(1, len(CPUS)))
    assert runtimes.count(set(CPUS)) == 1
    assert all(endpoint_cpus == set(CPUS) for _, _, endpoint_cpus in reports.values())
    assert main_thread_cpus == set(CPUS)
    # The controller's home went with its runtime loop's thread: waits happen anywhere again.
    assert home_cpu.wait_at_home(lambda: os.sched_getaffinity(0)) == set(CPUS)


@several_cpus
def test_without_home_cpus_no_thread_is_pinned() -> None:
    danaus.configure(transport="tcp", home_cpus=False)
    try:
        procs = this_host().spawn_procs(per_host={"gpus": 2})
        reports = procs.spawn("where", Where).masks.call().get(timeout=60)
        runtime_cpus = _runtime_thread_cpus()
    finally:
        danaus.shutdown()
    assert runtime_cpus == set(CPUS)
    assert all(runtime == set(CPUS) for _, runtime, _ in reports.values())


def test_home_cpus_must_be_a_bool() -> None:
    with pytest.raises(TypeError, match="home_cpus must be True or False"):
        danaus.configure(transport="tcp", home_cpus="yes")
