"""Progress of long operations people wait on (starting many procs), on a terminal only.

A bar appears on standard error once the operation has lasted `DELAY` seconds,
and only when standard error is a terminal: nothing is printed when output is
redirected to a file or a pipe, or when the ``progress`` setting is False
(``DANAUS_PROGRESS=0``); True (``DANAUS_PROGRESS=1``) shows it anyway, at once.
It disappears when the operation ends.
Safe to advance from any thread.
"""

from __future__ import annotations

import sys
import threading
import time
from types import TracebackType
from typing import IO, TYPE_CHECKING, Any

from danaus.core import config

if TYPE_CHECKING:
    from rich.progress import Progress as RichProgress

DELAY = 1.0
"""Seconds an operation runs before its bar appears (quick ones never show one)."""


def wanted(stream: IO[Any] | None = None) -> bool:
    """Whether to show progress on ``stream`` (stderr): on a terminal, or as the setting says."""
    setting = config.setting("progress")
    if setting is not None:
        return bool(setting)
    stream = stream if stream is not None else sys.stderr
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


class Progress:
    """A bar for ``total`` steps of ``description``; use as a context manager."""

    def __init__(self, description: str, total: int, *, delay: float = DELAY) -> None:
        self._shown = wanted()
        if config.setting("progress"):
            delay = 0.0
        self._description = description
        self._total = total
        self._done = 0
        self._started = time.monotonic()
        self._delay = delay
        self._lock = threading.Lock()
        self._bar: RichProgress | None = None
        self._task = 0

    def advance(self, steps: int = 1) -> None:
        """``steps`` more are done (from any thread)."""
        with self._lock:
            self._done += steps
            due = time.monotonic() - self._started >= self._delay
            if self._bar is None and self._shown and due:
                self._bar = self._start_bar()
            if self._bar is not None:
                self._bar.update(self._task, completed=self._done)

    def _start_bar(self) -> RichProgress:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
        from rich.progress import Progress as RichProgress

        bar = RichProgress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=Console(stderr=True, force_terminal=True),
            transient=True,
            redirect_stdout=False,
            redirect_stderr=False,
        )
        self._task = bar.add_task(self._description, total=self._total)
        bar.start()
        return bar

    @property
    def visible(self) -> bool:
        """Whether the bar is on the screen now."""
        return self._bar is not None

    def close(self) -> None:
        with self._lock:
            if self._bar is not None:
                self._bar.stop()
                self._bar = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
