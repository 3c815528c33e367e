"""The latest lines the job's procs printed, kept by the controller for the dashboard.

Every line a proc prints reaches the controller already prefixed with who
printed it (``[trainers gpus=3] loss 0.25``, `danaus.core.logs`). On its way to
the controller's terminal, a `LogBook` keeps a copy of the newest
`CAPACITY` lines, numbered, so that a tool can ask for those after the last
one it has. Keeping them costs a split and an append per chunk of output;
parsing the prefixes is the tool's work.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from collections.abc import Callable

from danaus.admin.views import LogLine, LogsView

CAPACITY = 20_000
"""Lines kept; older ones are dropped."""
MAX_ANSWER = 5_000
"""Lines in one answer at most."""

Output = Callable[[int, str], None]
"""Where a world writes its procs' output: stream (1 stdout, 2 stderr) and text."""


class LogBook:
    """The newest lines of output, numbered from 1, safe to write and read from any thread."""

    def __init__(self, capacity: int = CAPACITY, clock: Callable[[], float] = time.time) -> None:
        self._lines: deque[LogLine] = deque(maxlen=capacity)
        self._next = 1
        self._clock = clock
        self._lock = threading.Lock()

    def write(self, stream: int, text: str) -> None:
        """Keep the complete lines of ``text`` (from ``stream``)."""
        now = self._clock()
        with self._lock:
            for line in text.splitlines():
                self._lines.append(LogLine(self._next, now, stream, line))
                self._next += 1

    def tee(self, output: Output) -> Output:
        """``output``, keeping a copy of each line here first."""

        def write(stream: int, text: str) -> None:
            self.write(stream, text)
            output(stream, text)

        return write

    def after(self, seq: int, limit: int = MAX_ANSWER) -> LogsView:
        """The lines numbered above ``seq``, at most ``limit`` of the newest of them."""
        with self._lock:
            newest = self._next - 1
            count = max(0, min(newest - seq, len(self._lines), limit))
            lines = list(itertools.islice(reversed(self._lines), count))
        lines.reverse()
        first = lines[0].seq if lines else newest + 1
        return LogsView(lines=lines, newest=newest, skipped=max(0, first - seq - 1))
