"""Procs' output on its way to the controller's terminal: options, and aggregation of lines.

Each line a proc prints reaches the controller prefixed with who printed it
(``[trainers gpus=3] loss 0.25``). With an aggregation window
(``ProcMesh.logging_option(stream_to_client=True, aggregate_window_sec=...)``),
identical lines from the procs of a mesh are held for the window and shown
once, with their count, so that 64 procs printing the same line make one line.
Nothing here knows a transport: a launcher feeds `OutputAggregator` the lines it
reads from its procs, with a clock and a way to run something later.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

_PREFIXED = re.compile(r"\[(?P<label>[^\]\n]*)\] (?P<text>.*)", re.DOTALL)


@dataclass(frozen=True)
class LoggingOptions:
    """What ``ProcMesh.logging_option`` sets for the procs of a mesh."""

    stream_to_client: bool = False
    aggregate_window_sec: float | None = None
    level: int = logging.INFO

    @classmethod
    def checked(
        cls, stream_to_client: bool, aggregate_window_sec: float | None, level: int
    ) -> LoggingOptions:
        """The options, or a `ValueError` (`TypeError`) saying what is wrong with them."""
        if not isinstance(level, int) or isinstance(level, bool):
            raise TypeError(f"level must be an int logging level, not {level!r}")
        if not 0 <= level <= 255:
            raise ValueError(f"invalid logging level: {level}")
        if aggregate_window_sec is not None:
            if not stream_to_client:
                raise ValueError("aggregate_window_sec needs stream_to_client=True")
            if isinstance(aggregate_window_sec, bool) or not isinstance(
                aggregate_window_sec, int | float
            ):
                raise TypeError(
                    f"aggregate_window_sec must be a number, not {aggregate_window_sec!r}"
                )
            if not (math.isfinite(aggregate_window_sec) and aggregate_window_sec > 0):
                raise ValueError(
                    f"aggregate_window_sec must be a positive number, got {aggregate_window_sec}"
                )
        return cls(bool(stream_to_client), aggregate_window_sec, level)


@dataclass
class _Group:
    """One distinct text held in a window: how often, and from which meshes."""

    first: str
    """The first line of the group, as it came."""
    count: int = 0
    sources: list[str] = field(default_factory=list)


class OutputAggregator:
    """One output stream (stdout or stderr) of procs, on its way to one sink.

    Lines from procs without an aggregation window are written at once. Lines
    from procs with one are held: the first held line opens a window of its
    proc's length; when it closes, each distinct text is written once, in order
    of first appearance, as ``[N similar log lines] [meshes] text`` (or as it
    came, if it came once). `flush` writes what is held now.
    """

    def __init__(
        self,
        write: Callable[[str], None],
        clock: Callable[[], float],
        call_later: Callable[[float, Callable[[], None]], Any],
    ) -> None:
        self._write = write
        self._clock = clock
        self._call_later = call_later
        self._windows: dict[str, float] = {}
        self._held: dict[str, _Group] = {}
        self._closes_at: float | None = None

    def set_options(self, procs: Iterable[str], options: LoggingOptions) -> None:
        """Apply ``options`` to the lines of ``procs`` from now on."""
        for proc in procs:
            if options.aggregate_window_sec is None:
                self._windows.pop(proc, None)
            else:
                self._windows[proc] = options.aggregate_window_sec

    def forget(self, proc: str) -> None:
        """``proc`` is gone: write what is held, and drop its options."""
        self.flush()
        self._windows.pop(proc, None)

    def write(self, proc: str, text: str) -> None:
        """Complete lines (each ending with a newline) that ``proc`` printed."""
        window = self._windows.get(proc)
        if window is None:
            self._write(text)
            return
        for line in text.splitlines(keepends=True):
            self._hold(line)
        if self._closes_at is None:
            self._closes_at = self._clock() + window
            self._call_later(window, self._close)

    def _hold(self, line: str) -> None:
        match = _PREFIXED.fullmatch(line)
        key, source = (match["text"], _source(match["label"])) if match else (line, "")
        group = self._held.get(key)
        if group is None:
            group = self._held[key] = _Group(line)
        group.count += 1
        if source and source not in group.sources:
            group.sources.append(source)

    def _close(self) -> None:
        if self._closes_at is not None and self._clock() >= self._closes_at:
            self.flush()

    def flush(self) -> None:
        """Write every held line now."""
        held, self._held, self._closes_at = self._held, {}, None
        out = []
        for text, group in held.items():
            if group.count == 1:
                out.append(group.first)
            else:
                where = f"[{', '.join(group.sources)}] " if group.sources else ""
                out.append(f"[{group.count} similar log lines] {where}{text}")
        if out:
            self._write("".join(out))


def _source(label: str) -> str:
    """The mesh a prefix names (``trainers`` for ``trainers gpus=3``; ``proc`` for ``proc p.0``)."""
    return label.split(" ", 1)[0]
