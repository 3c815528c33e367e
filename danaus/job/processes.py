"""Processes a job starts on this host, found again and ended from any process of the user.

A job's worker outlives the process that applied the job (``danaus job
apply`` returns; ``danaus job kill`` ends it later), so it runs in a session
of its own, and the job keeps its pid with its start time: a pid the kernel
has since given to another process is never signalled.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

POLL = 0.05
"""Seconds between looks at a file or process being waited for."""


def start_time(pid: int) -> str | None:
    """When ``pid`` started (clock ticks since boot), or None if it has ended."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] in ("Z", "X") else fields[19]


def start(argv: Sequence[str], *, env: dict[str, str], log: Path) -> dict[str, Any]:
    """Start ``argv`` in a session of its own, its output to ``log``; how to find it again."""
    with open(log, "ab") as out:
        process = subprocess.Popen(
            list(argv),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    _children[process.pid] = process
    return {"pid": process.pid, "start": start_time(process.pid)}


def alive(record: dict[str, Any]) -> bool:
    """Whether the process ``record`` names still runs (and is still that process)."""
    _reap(record["pid"])
    return record["start"] is not None and start_time(record["pid"]) == record["start"]


def end(records: Sequence[dict[str, Any]], timeout: float = 15.0) -> None:
    """SIGTERM each process's session, SIGKILL it after ``timeout`` s; return once all ended."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for record in records:
            if alive(record):
                _signal_group(record["pid"], sig)
        deadline = time.monotonic() + timeout
        while any(alive(r) for r in records) and time.monotonic() < deadline:
            time.sleep(POLL)
        if not any(alive(r) for r in records):
            return
    raise RuntimeError(f"processes {[r['pid'] for r in records if alive(r)]} did not end")


def wait_for_file(path: Path, timeout: float, failed: Callable[[], str | None]) -> str:
    """The text of ``path`` once it exists; ``RuntimeError`` on ``failed()``'s reason or timeout."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        reason = failed()
        if reason is not None:
            raise RuntimeError(reason)
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear within {timeout:g} s")
        time.sleep(POLL)
    return path.read_text().strip()


def log_tail(path: Path, lines: int = 20) -> str:
    """The end of a log, to explain a failure."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


_children: dict[int, subprocess.Popen[bytes]] = {}
"""Processes this process started, to reap once they end."""


def _reap(pid: int) -> None:
    child = _children.get(pid)
    if child is not None and child.poll() is not None:
        del _children[pid]


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, sig)
