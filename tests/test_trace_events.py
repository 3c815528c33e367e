"""Trace events and the garbage collector."""

from __future__ import annotations

import gc
import weakref

from danaus.core import trace as ev


class Marker:
    """Something a scenario might record, weakly referenceable to see when it is freed."""


def test_a_history_event_in_a_reference_cycle_is_still_collected():
    """Most events are not tracked by the collector; one holding a scenario's values is."""
    marker = Marker()
    freed = weakref.ref(marker)
    data: dict[str, object] = {"marker": marker}
    data["event"] = ev.HistoryRecorded(proc="root", event="op", data=data)
    del marker, data
    gc.collect()
    assert freed() is None


def test_untracked_events_keep_what_they_hold_alive_and_readable():
    trace = ev.Trace(lambda: 1.5)
    trace.record(ev.Restart(proc="root", mesh="m", ranks=[0, 2]))
    gc.collect()
    assert list(trace.lines()) == [
        '{"kind":"restart","mesh":"m","ranks":[0,2],"t":1.5,"proc":"root"}'
    ]
