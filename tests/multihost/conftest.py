"""Fixtures for workers and the controllers that attach to them."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import danaus
from tests.cluster import Cluster, NamespaceControl
from tests.tcp.conftest import wait_until

ROOT = Path(__file__).resolve().parents[2]
FAST = {"heartbeat_interval": 0.3, "heartbeat_timeout": 3.0}
"""Heartbeats that notice a lost host within seconds, with room for a busy machine."""
DETECTED = 3 * FAST["heartbeat_timeout"]
"""A lost host is reported well within this (a hang guard, with room for a busy machine)."""


@dataclass
class Worker:
    """A ``danaus worker`` process on loopback, with its key."""

    process: subprocess.Popen[str]
    key: str
    address: str = ""
    lines: list[str] = field(default_factory=list)

    def output(self) -> str:
        """What the worker has printed so far."""
        if self.process.stdout is not None:
            with contextlib.suppress(TypeError, OSError):
                self.lines.extend(self.process.stdout.readlines())
        return "".join(self.lines)

    def wait_for_output(self, text: str, timeout: float) -> str:
        """Wait until the worker has printed ``text``; all it printed."""
        deadline = time.monotonic() + timeout
        while text not in self.output():
            if self.process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the worker never printed {text!r}:\n{self.output()}")
            time.sleep(0.05)
        return self.output()

    def group(self) -> list[int]:
        """Every process in the worker's tree (its host agents and their procs)."""
        return descendants(self.process.pid)

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)


def descendants(pid: int) -> list[int]:
    """The processes below ``pid`` (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z":
            children.setdefault(int(fields[1]), []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def start_worker(key: str, *args: str, env: dict[str, str] | None = None) -> Worker:
    """Start ``danaus worker`` on a free loopback port; return once it listens."""
    process = subprocess.Popen(
        [sys.executable, "-m", "danaus.cli", "worker", "--listen", "127.0.0.1:0", *args],
        cwd=ROOT,
        env={**os.environ, "DANAUS_JOB_KEY": key, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    worker = Worker(process, key)
    assert process.stdout is not None
    line = process.stdout.readline()
    worker.lines.append(line)
    if "listening on" not in line:
        worker.stop()
        pytest.fail(f"the worker did not start: {line}{worker.output()}")
    worker.address = line.rsplit(" ", 1)[1].strip()
    os.set_blocking(process.stdout.fileno(), False)
    return worker


@pytest.fixture
def workers() -> Iterator[Callable[..., Worker]]:
    """Start loopback workers (``workers(key, *args)``); all are stopped after the test."""
    started: list[Worker] = []

    def start(key: str | None = None, *args: str, env: dict[str, str] | None = None) -> Worker:
        worker = start_worker(key or danaus.make_job_key(), *args, env=env)
        started.append(worker)
        return worker

    try:
        yield start
    finally:
        for worker in started:
            worker.stop()


@pytest.fixture
def controller() -> Iterator[Callable[..., None]]:
    """Make this process a controller (``controller(**options)``), shut down after the test."""

    def start(transport: str = "tcp", **options: object) -> None:
        danaus.configure(transport=transport, **{**FAST, **options})

    try:
        yield start
    finally:
        danaus.shutdown()


@pytest.fixture
def host_control(namespace_cluster: Cluster) -> Iterator[NamespaceControl]:
    """Power over the cluster's machines for one test (``configure(host_control=...)``).

    After the test, whatever happened: every cut is removed, every crashed
    host plugged back in, this process's job shut down, and every host clean.
    """
    control = NamespaceControl(namespace_cluster)
    try:
        yield control
    finally:
        control.restore()
        danaus.shutdown()
        for host in namespace_cluster.hosts:
            wait_until(lambda h=host: namespace_cluster.clean(h), 60, f"{host.name} to be clean")
