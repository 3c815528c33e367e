"""The procs' output lines on the page: who printed each (host, mesh, coordinates, proc).

Lines reach the controller prefixed (`danaus.transports.tcp.output`):
``[trainers gpus=3] text`` from an actor, ``[proc root:1.0] text`` from code
outside any actor, with the host's name first from another host than the
controller's (``[node2 trainers gpus=3] text``); lines that an aggregation
window folded read ``[5 similar log lines] [trainers] text``. `LogShelf` keeps
the newest lines, parsed, for pages that open later.
"""

from __future__ import annotations

import re
from collections import deque

import msgspec

from danaus.admin.views import LogLine

KEPT = 5_000
"""Lines a page gets when it opens."""

_PREFIXED = re.compile(r"\[(?P<label>[^\]\n]*)\] (?P<text>.*)", re.DOTALL)
_SIMILAR = re.compile(r"(?P<count>\d+) similar log lines")


class PageLine(msgspec.Struct, frozen=True):
    seq: int
    at: float
    stream: int
    host: str
    mesh: str
    coords: dict[str, int]
    proc: str
    text: str
    count: int = 1
    """How many identical lines this one stands for (an aggregation window folded them)."""


def _coords(words: list[str]) -> dict[str, int]:
    """The trailing ``dim=index`` words of ``words``, removed from it."""
    found: list[tuple[str, int]] = []
    while words and "=" in words[-1]:
        dim, _, index = words.pop().partition("=")
        if not index.lstrip("-").isdigit():
            words.append(f"{dim}={index}")
            break
        found.append((dim, int(index)))
    return dict(reversed(found))


def parse(line: LogLine) -> PageLine:
    """``line`` with who printed it taken from its prefix (empty fields where it has none)."""
    host = mesh = proc = ""
    coords: dict[str, int] = {}
    count = 1
    text = line.text
    match = _PREFIXED.fullmatch(text)
    if match is not None:
        label, text = match["label"], match["text"]
        similar = _SIMILAR.fullmatch(label)
        if similar is not None:
            count = int(similar["count"])
            inner = _PREFIXED.fullmatch(text)
            if inner is not None:
                mesh, text = inner["label"], inner["text"]
        else:
            words = label.split()
            coords = _coords(words)
            if len(words) >= 2 and words[-2] == "proc":
                proc = words[-1]
                del words[-2:]
            elif words:
                mesh = words.pop()
            host = words[-1] if words else ""
    return PageLine(line.seq, line.at, line.stream, host, mesh, coords, proc, text, count)


class LogShelf:
    """The newest `KEPT` parsed lines, and the number of the last one seen."""

    def __init__(self) -> None:
        self.lines: deque[PageLine] = deque(maxlen=KEPT)
        self.newest = 0

    def add(self, lines: list[LogLine]) -> list[PageLine]:
        """Parse and keep ``lines``; the parsed ones."""
        parsed = [parse(line) for line in lines]
        self.lines.extend(parsed)
        if lines:
            self.newest = lines[-1].seq
        return parsed

    def clear(self) -> None:
        self.lines.clear()
        self.newest = 0
