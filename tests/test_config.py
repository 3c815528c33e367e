"""Choosing a transport."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import danaus
from danaus.core import config

ROOT = Path(__file__).resolve().parent.parent


def test_unknown_transport_is_refused():
    with pytest.raises(ValueError, match="unknown transport 'carrier-pigeon'"):
        danaus.configure(transport="carrier-pigeon")


def test_configure_after_first_use_is_refused():
    danaus.configure(transport="sim")
    try:
        config.current_world()
        with pytest.raises(RuntimeError, match="shutdown"):
            danaus.configure(transport="tcp")
    finally:
        danaus.shutdown()


def test_bad_options_are_refused():
    with pytest.raises(ValueError, match="heartbeat"):
        danaus.configure(transport="tcp", heartbeat_interval=2, heartbeat_timeout=1)
    with pytest.raises(ValueError, match="hosts"):
        danaus.configure(transport="sim", hosts=0)


@pytest.mark.parametrize("name", ["sim", "tcp", None])
def test_environment_variable_selects_the_transport(name):
    env = {k: v for k, v in os.environ.items() if k != "DANAUS_TRANSPORT"}
    if name is not None:
        env["DANAUS_TRANSPORT"] = name
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import danaus; from danaus.core import config; "
            "danaus.this_host(); print(config.installed().name)",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.strip()
    assert out == (name or "tcp")


THREAD_KEEPS_ITS_LOOP = """
import asyncio, threading
import danaus

loop = asyncio.new_event_loop()
loop_set, configured, found = threading.Event(), threading.Event(), []

def worker():
    asyncio.set_event_loop(loop)
    loop_set.set()
    configured.wait(30)
    found.append(asyncio.get_event_loop() is loop)

thread = threading.Thread(target=worker)
thread.start()
loop_set.wait(30)
danaus.configure(transport="sim")
configured.set()
thread.join(30)
print(found)
"""


def test_choosing_sim_keeps_the_event_loops_other_threads_have_set():
    """Threads that set a loop before ``sim`` was chosen (ucxx's notifier does) still find it."""
    env = {k: v for k, v in os.environ.items() if k != "DANAUS_TRANSPORT"}
    done = subprocess.run(
        [sys.executable, "-c", THREAD_KEEPS_ITS_LOOP],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[True]"
