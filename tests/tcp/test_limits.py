"""The limits are options or environment variables, checked with errors that name them."""

from __future__ import annotations

import pytest

import danaus
from danaus.core import config
from danaus.transports.tcp.limits import Limits, MiB
from danaus.transports.tcp.refusals import RefusalLog


@pytest.fixture(autouse=True)
def _forget_configure(monkeypatch):
    """``configure`` here only checks options; the next test starts with the choice it had."""
    monkeypatch.setattr(config, "_choice", config._choice)


def test_options_override_the_environment_which_overrides_the_defaults(monkeypatch):
    assert Limits.from_options() == Limits()
    monkeypatch.setenv("DANAUS_FRAME_BYTES", str(2 * MiB))
    monkeypatch.setenv("DANAUS_HANDSHAKE_TIMEOUT", "0.5")
    assert Limits.from_options().frame_bytes == 2 * MiB
    assert Limits.from_options().handshake_timeout == 0.5
    assert Limits.from_options(frame_bytes=MiB, handshake_timeout=None).frame_bytes == MiB


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_message_bytes": True}, "max_message_bytes must be an int"),
        ({"max_message_bytes": 0}, "max_message_bytes must be at least 1"),
        ({"frame_bytes": 1024}, "frame_bytes must be at least 65536"),
        ({"frame_bytes": 8 * MiB, "max_message_bytes": MiB}, "must not exceed"),
        ({"handshake_timeout": 0}, "positive"),
        ({"handshake_timeout": float("inf")}, "finite"),
        ({"handshake_timeout": "soon"}, "not a number"),
        ({"max_pending_handshakes": 2.5}, "must be an int"),
    ],
)
def test_bad_limits_are_refused_by_configure(options, message):
    with pytest.raises(ValueError, match=message):
        danaus.configure(transport="tcp", **options)


def test_a_bad_environment_variable_is_named(monkeypatch):
    monkeypatch.setenv("DANAUS_MAX_PENDING_HANDSHAKES", "lots")
    with pytest.raises(ValueError, match="DANAUS_MAX_PENDING_HANDSHAKES='lots' is not a number"):
        danaus.configure(transport="tcp")


@pytest.mark.parametrize("bind_host", ["0.0.0.0", "192.0.2.7", "example.org"])
def test_unencrypted_jobs_are_refused_off_loopback(bind_host):
    with pytest.raises(ValueError, match="encrypt=False is refused"):
        danaus.configure(transport="tcp", encrypt=False, bind_host=bind_host)
    danaus.configure(transport="tcp", encrypt=True, bind_host=bind_host)
    danaus.configure(transport="tcp", encrypt=False, bind_host="127.0.0.1")


def test_refusals_are_logged_once_per_address_per_interval(caplog):
    now = [0.0]
    refusals = RefusalLog(interval=60, capacity=2, clock=lambda: now[0])
    for _ in range(5):
        refusals.refused("proc p", "10.0.0.1", "its key is not the job's")
    refusals.refused("proc p", "10.0.0.2", "garbage")
    now[0] = 61
    refusals.refused("proc p", "10.0.0.1", "its key is not the job's")
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "proc p refused a connection from 10.0.0.1: its key is not the job's",
        "proc p refused a connection from 10.0.0.2: garbage",
        "proc p refused a connection from 10.0.0.1: its key is not the job's"
        " (4 more from it in the last 60 s)",
    ]
    for address in ("10.0.0.3", "10.0.0.4"):  # past the capacity: 10.0.0.1 is forgotten
        refusals.refused("proc p", address, "garbage")
    refusals.refused("proc p", "10.0.0.1", "garbage")
    assert caplog.records[-1].getMessage() == "proc p refused a connection from 10.0.0.1: garbage"


def test_a_launch_the_process_limit_would_cut_short_is_refused_before_any_starts(monkeypatch):
    from danaus.transports.tcp import launcher

    monkeypatch.setattr(launcher.os, "geteuid", lambda: 1000)
    monkeypatch.setattr(launcher.resource, "getrlimit", lambda _: (64, 64))
    with pytest.raises(RuntimeError, match=r"limit \(ulimit -u\) is 64"):
        launcher._check_process_limit(100)
    monkeypatch.setattr(launcher.resource, "getrlimit", lambda _: (10**9, 10**9))
    launcher._check_process_limit(100)
