"""A scenario's history: the operations its workload performed and how each ended.

Invariants are written over the history, as in Jepsen: every operation has an
``invoke`` event and, unless the run ended first, an ``ok`` or ``fail`` event.
Events also go into the run's trace.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any

from danaus.core.trace import HistoryRecorded, Trace
from danaus.core.transport import ROOT


class History:
    """Events recorded by the controller's code during a chaos run."""

    def __init__(self, clock: Callable[[], float], trace: Trace) -> None:
        self._clock = clock
        self._trace = trace
        self._ids = itertools.count()
        self.events: list[dict[str, Any]] = []

    def record(self, kind: str, **fields: Any) -> None:
        """Record an event of ``kind`` with ``fields`` (JSON-friendly values)."""
        event = {"t": self._clock(), "kind": kind, **fields}
        self.events.append(event)
        self._trace.record(HistoryRecorded(proc=ROOT, event=kind, data=fields))

    def invoke(self, op: str, **fields: Any) -> int:
        """Record the start of operation ``op``; returns its id."""
        op_id = next(self._ids)
        self.record("invoke", op=op, id=op_id, **fields)
        return op_id

    def ok(self, op_id: int, **fields: Any) -> None:
        """Record that operation ``op_id`` succeeded."""
        self.record("ok", id=op_id, **fields)

    def fail(self, op_id: int, error: BaseException | str, **fields: Any) -> None:
        """Record that operation ``op_id`` failed."""
        self.record("fail", id=op_id, error=str(error), **fields)

    def of(self, kind: str) -> Iterator[dict[str, Any]]:
        """The events of one kind, in order."""
        return (e for e in self.events if e["kind"] == kind)

    def operations(self) -> list[dict[str, Any]]:
        """Each operation's invoke event merged with its outcome (``status``: ok, fail, open)."""
        ops: dict[int, dict[str, Any]] = {}
        for event in self.events:
            if event["kind"] == "invoke":
                ops[event["id"]] = {**event, "status": "open"}
            elif event["kind"] in ("ok", "fail") and event["id"] in ops:
                op = ops[event["id"]]
                op.update({k: v for k, v in event.items() if k not in ("kind", "id")})
                op["status"] = event["kind"]
                op["end"] = event["t"]
        return list(ops.values())
