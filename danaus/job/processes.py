"""Processes a job starts on this host, found again and ended from any process of the user.

A job's worker outlives the process that applied the job (``danaus job
apply`` returns; ``danaus job kill`` ends it later), so it runs in a session
of its own, and the job keeps its pid with its start time (psutil's
``create_time``): a pid the kernel has since given to another process is never
signalled.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import psutil

from danaus.job.waiting import poll

POLL = 0.05
"""Seconds between looks at a file or process being waited for."""


def start_time(pid: int) -> float | None:
    """When ``pid`` started (seconds since the epoch), or None if it has ended."""
    try:
        process = psutil.Process(pid)
        if process.status() in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):
            return None
        return process.create_time()
    except psutil.Error:
        return None


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
        if poll(lambda: not any(alive(r) for r in records), every=POLL, timeout=timeout):
            return
    raise RuntimeError(f"processes {[r['pid'] for r in records if alive(r)]} did not end")


def wait_for_file(path: Path, timeout: float, failed: Callable[[], str | None]) -> str:
    """The text of ``path`` once it exists; ``RuntimeError`` on ``failed()``'s reason, or
    ``TimeoutError``."""

    def appeared() -> bool:
        if path.exists():
            return True
        reason = failed()
        if reason is not None:
            raise RuntimeError(reason)
        return False

    if not poll(appeared, every=POLL, timeout=timeout):
        raise TimeoutError(f"{path} did not appear within {timeout:g} s")
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
