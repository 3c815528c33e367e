"""The limits are options or environment variables, checked with errors that name them."""

from __future__ import annotations

from collections.abc import Callable

import pytest

import danaus
from danaus.core import config
from danaus.core.settings import Limits, MiB, Settings
from danaus.transports.tcp.refusals import RefusalLog


@pytest.fixture(autouse=True)
def _forget_configure(monkeypatch):
    """``configure`` here only checks options; the next test starts with the settings it had."""
    monkeypatch.setattr(config, "_given", config._given)


def test_options_override_the_environment_which_overrides_the_defaults(monkeypatch):
    assert Settings.from_environment({}).job_options() == Settings().job_options()
    assert isinstance(Settings(), Limits)
    monkeypatch.setenv("DANAUS_FRAME_BYTES", str(2 * MiB))
    monkeypatch.setenv("DANAUS_HANDSHAKE_TIMEOUT", "0.5")
    assert Settings.from_environment().frame_bytes == 2 * MiB
    assert Settings.from_environment().handshake_timeout == 0.5
    assert Settings.from_environment().given(frame_bytes=MiB).frame_bytes == MiB
    danaus.configure(transport="tcp", frame_bytes=MiB)
    assert (config.settings().frame_bytes, config.settings().handshake_timeout) == (MiB, 0.5)


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"max_message_bytes": True}, TypeError, "max_message_bytes must be an int or None"),
        ({"max_message_bytes": 0}, ValueError, "max_message_bytes must be at least 1"),
        ({"frame_bytes": 1024}, ValueError, "frame_bytes must be at least 65536"),
        ({"frame_bytes": 8 * MiB, "max_message_bytes": MiB}, ValueError, "must not exceed"),
        ({"handshake_timeout": 0}, ValueError, "positive"),
        ({"handshake_timeout": float("inf")}, ValueError, "finite"),
        ({"handshake_timeout": "soon"}, TypeError, "handshake_timeout must be a number"),
        ({"max_pending_handshakes": 2.5}, TypeError, "must be an int"),
    ],
)
def test_bad_limits_are_refused_by_configure(options, error, message):
    with pytest.raises(error, match=message):
        danaus.configure(transport="tcp", **options)


def test_a_bad_environment_variable_is_named(monkeypatch):
    monkeypatch.setenv("DANAUS_MAX_PENDING_HANDSHAKES", "lots")
    with pytest.raises(ValueError, match="DANAUS_MAX_PENDING_HANDSHAKES='lots' is not an int"):
        danaus.configure(transport="tcp")


@pytest.mark.parametrize("bind_host", ["0.0.0.0", "192.0.2.7", "example.org"])
def test_unencrypted_jobs_are_refused_off_loopback(bind_host):
    with pytest.raises(ValueError, match="encrypt=False is refused"):
        danaus.configure(transport="tcp", encrypt=False, bind_host=bind_host)
    danaus.configure(transport="tcp", encrypt=True, bind_host=bind_host)
    danaus.configure(transport="tcp", encrypt=False, bind_host="127.0.0.1")


def test_refusals_are_logged_once_per_address_per_interval(caplog):
    """The first refusal from an address at once; the count of the rest when the interval
    ends, on a timer, even if no refusal comes after them."""
    now = [0.0]
    timers: list[tuple[float, Callable[[], None]]] = []
    refusals = RefusalLog(
        lambda delay, flush: timers.append((now[0] + delay, flush)),
        interval=60,
        capacity=2,
        clock=lambda: now[0],
    )

    def run_timers(until: float) -> None:
        now[0] = until
        for when, flush in sorted(timers, key=lambda timer: timer[0]):
            if when <= until:
                timers.remove((when, flush))
                flush()

    for _ in range(5):
        refusals.refused("proc p", "10.0.0.1", "garbage")
    refusals.refused("proc p", "10.0.0.1", "its key is not the job's")
    refusals.refused("proc p", "10.0.0.2", "garbage")
    assert [r.getMessage() for r in caplog.records] == [
        "proc p refused a connection from 10.0.0.1: garbage",
        "proc p refused a connection from 10.0.0.2: garbage",
    ]
    assert len(timers) == 1
    run_timers(60)
    assert caplog.records[-1].getMessage() == (
        "proc p refused 5 more connections from 10.0.0.1 in the last 60 s "
        "(the last: its key is not the job's)"
    )
    refusals.refused("proc p", "10.0.0.1", "garbage")  # a new interval, begun at 60
    run_timers(119)
    assert len(caplog.records) == 3
    run_timers(120)
    assert caplog.records[-1].getMessage() == (
        "proc p refused 1 more connections from 10.0.0.1 in the last 60 s (the last: garbage)"
    )
    run_timers(200)
    assert len(caplog.records) == 4  # a quiet interval logs nothing
    refusals.refused("proc p", "10.0.0.2", "garbage")
    refusals.refused("proc p", "10.0.0.2", "garbage")
    refusals.refused("proc p", "10.0.0.3", "garbage")  # past the capacity: 10.0.0.1 is forgotten
    refusals.refused("proc p", "10.0.0.4", "garbage")  # and then 10.0.0.2, with its count
    assert [r.getMessage() for r in caplog.records[-3:]] == [
        "proc p refused a connection from 10.0.0.3: garbage",
        "proc p refused a connection from 10.0.0.4: garbage",
        "proc p refused 1 more connections from 10.0.0.2 in the last 0 s (the last: garbage)",
    ]


def test_a_launch_the_process_limit_would_cut_short_is_refused_before_any_starts(monkeypatch):
    from danaus.transports.tcp import launcher

    monkeypatch.setattr(launcher.os, "geteuid", lambda: 1000)
    monkeypatch.setattr(launcher.resource, "getrlimit", lambda _: (64, 64))
    with pytest.raises(RuntimeError, match=r"limit \(ulimit -u\) is 64"):
        launcher._check_process_limit(100)
    monkeypatch.setattr(launcher.resource, "getrlimit", lambda _: (10**9, 10**9))
    launcher._check_process_limit(100)


def test_a_host_budget_counts_every_live_proc_and_says_how_many_fit():
    from danaus.transports.tcp.budget import ProcBudget, ProcBudgetError

    budget = ProcBudget("h", limit=5, available=lambda: 10**12)
    budget.admit(["a", "b"])
    budget.admit(["c", "d"])  # a second request counts the first one's procs
    with pytest.raises(ProcBudgetError, match=r"room for 1 more procs, not 2: this job runs 4"):
        budget.admit(["e", "f"])
    budget.ended("a")
    budget.admit(["e", "f"])
    with pytest.raises(ProcBudgetError, match="room for 0 more procs, not 1"):
        budget.admit(["g"])


def test_a_host_budget_needs_memory_for_each_proc_beyond_those_starting():
    from danaus.transports.tcp.budget import ProcBudget, ProcBudgetError

    free = [10 * MiB]
    budget = ProcBudget("h", limit=1024, available=lambda: free[0], proc_bytes=MiB)
    budget.admit([f"p{i}" for i in range(6)])  # starting: their memory is not taken yet
    with pytest.raises(ProcBudgetError, match=r"room for 4 more procs, not 5: its available"):
        budget.admit([f"q{i}" for i in range(5)])
    for i in range(6):
        budget.started(f"p{i}")
    free[0] = 4 * MiB  # now they took it
    budget.admit([f"q{i}" for i in range(4)])


def test_a_spawn_beyond_the_host_s_budget_is_refused_and_its_procs_reported(monkeypatch):
    """Three requests: the third goes beyond ``max_procs_per_host`` counted over all of them;
    with too little memory, even one proc is refused. Calls to refused procs fail at once."""
    from types import SimpleNamespace

    import psutil

    from danaus import Actor, SupervisionError, endpoint, this_host
    from danaus.transports.tcp import budget

    class Pinged(Actor):
        @endpoint
        def ping(self) -> int:
            return 1

    danaus.configure(transport="tcp", max_procs_per_host=5)
    try:
        first = this_host().spawn_procs(per_host={"w": 2})
        second = this_host().spawn_procs(per_host={"w": 2})
        first.initialized.get(timeout=60)
        second.initialized.get(timeout=60)
        third = this_host().spawn_procs(per_host={"w": 2})
        with pytest.raises(budget.ProcBudgetError, match="room for 1 more procs, not 2"):
            third.initialized.get(timeout=60)
        second.stop().get(timeout=30)
        fourth = this_host().spawn_procs(per_host={"w": 2})
        fourth.initialized.get(timeout=60)
        monkeypatch.setattr(psutil, "virtual_memory", lambda: SimpleNamespace(available=8 * MiB))
        starved = this_host().spawn_procs(per_host={"w": 1})
        with pytest.raises(budget.ProcBudgetError, match="holds 0 more idle procs"):
            starved.initialized.get(timeout=60)
        assert list(first.spawn("pinged", Pinged).ping.call().get(timeout=30).values()) == [1, 1]
        monkeypatch.setattr(danaus, "unhandled_fault_hook", lambda failure: None)
        with pytest.raises(SupervisionError, match=r"was not started: host .* has room for 0"):
            starved.spawn("pinged", Pinged).ping.call_one().get(timeout=30)
    finally:
        danaus.shutdown()
