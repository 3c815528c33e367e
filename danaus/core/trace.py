"""A run's trace: every send, delivery, spawn, stop and fault, in order.

On the simulator the trace is the proof of determinism: the same program and
seed give the same trace byte for byte, so its digest identifies a run.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any


class Trace:
    """An append-only list of events stamped with the world's clock."""

    def __init__(self, clock: Callable[[], float], enabled: bool = True) -> None:
        self._clock = clock
        self.enabled = enabled
        self.events: list[dict[str, Any]] = []

    def record(self, kind: str, proc: str, **fields: Any) -> None:
        if self.enabled:
            self.events.append({"t": self._clock(), "kind": kind, "proc": proc, **fields})

    def lines(self) -> Iterator[str]:
        """The events as JSON lines."""
        for event in self.events:
            yield json.dumps(event, separators=(",", ":"), default=str)

    def digest(self) -> str:
        """SHA-256 of the JSON lines: equal digests mean identical runs."""
        h = hashlib.sha256()
        for line in self.lines():
            h.update(line.encode())
            h.update(b"\n")
        return h.hexdigest()

    def write(self, path: str | Path) -> None:
        """Write the trace as JSON lines."""
        with open(path, "w") as f:
            for line in self.lines():
                f.write(line)
                f.write("\n")

    def __len__(self) -> int:
        return len(self.events)
