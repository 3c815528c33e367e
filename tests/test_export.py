"""Trace exports: Perfetto JSON and the HTML sequence diagram, on real runs."""

from __future__ import annotations

import itertools
import json
from collections import Counter
from html.parser import HTMLParser

import pytest
from kvstore import BuggyKV

import danaus.sim
from danaus.chaos import run_scenario
from danaus.chaos.export import (
    procs,
    to_html,
    to_perfetto,
    write_html,
    write_perfetto,
)
from danaus.core import trace as ev
from danaus.core.trace import FAULT_EVENTS
from tests.programs.mixed_workload import main

VOID = {"meta", "br", "hr", "img", "input", "link"}


def buggy_kv_seed_26() -> list[dict]:
    """A run that loses writes: faults, a skipped fault, a crash, a failover."""
    return run_scenario(BuggyKV(), 26).trace.events


def mixed_workload() -> list[dict]:
    return danaus.sim.run(main, hosts=3, seed=7).trace.events


@pytest.fixture(scope="module", params=[buggy_kv_seed_26, mixed_workload])
def events(request) -> list[dict]:
    return request.param()


def received(events: list[dict]) -> int:
    return sum(isinstance(e, ev.Received) for e in events)


def all_procs(events: list[dict]) -> set[str]:
    return {e.proc for e in events} | {e.dst for e in events if isinstance(e, ev.Sent)}


def test_the_chaos_trace_has_what_the_exports_show():
    events = buggy_kv_seed_26()
    kinds = Counter(type(e) for e in events)
    assert kinds[ev.FaultApplied] == 4 and kinds[ev.FaultHealed] == 3
    assert kinds[ev.FaultSkipped] == 1
    assert kinds[ev.Down] and kinds[ev.Lost] and kinds[ev.Failure]
    sent = sum(isinstance(e, ev.Sent) for e in events)
    assert sent > received(events)  # messages to the crashed proc at shutdown


def test_perfetto_json(events):
    trace = to_perfetto(events)
    assert json.loads(json.dumps(trace)) == trace
    assert trace["displayTimeUnit"] == "ms"
    out = trace["traceEvents"]
    for e in out:
        assert {"ph", "ts", "pid", "tid", "name"} <= e.keys(), e

    names = {e["tid"]: e["args"]["name"] for e in out if e["name"] == "thread_name"}
    assert set(names.values()) == all_procs(events)
    assert list(names.values())[: len(procs(events))] == procs(events)

    starts = {e["id"]: e for e in out if e["ph"] == "s"}
    ends = {e["id"]: e for e in out if e["ph"] == "f"}
    assert len(starts) == sum(e["ph"] == "s" for e in out) == received(events)
    assert starts.keys() == ends.keys()
    for flow, start in starts.items():
        end = ends[flow]
        assert end["bp"] == "e" and start["cat"] == end["cat"] == "message"
        assert start["name"] == end["name"]
        assert start["ts"] <= end["ts"]

    slices: dict[int, list[dict]] = {}
    for e in out:
        if e["ph"] == "X":
            slices.setdefault(e["tid"], []).append(e)
    for track in slices.values():  # never overlapping, so each flow binds to one slice
        for before, after in itertools.pairwise(track):
            assert after["ts"] >= before["ts"] + before["dur"]
    for e in out:
        if e["ph"] in "sf":
            assert any(s["ts"] < e["ts"] < s["ts"] + s["dur"] for s in slices[e["tid"]])

    faults = [e for e in events if isinstance(e, FAULT_EVENTS)]
    instants = [e for e in out if e["ph"] == "i" and e["s"] == "g"]
    assert len(instants) == len(faults)
    for fault, instant in zip(faults, instants):
        assert fault.fault in instant["name"]
        assert names[instant["tid"]] == "nemesis"
    markers = {e["cat"] for e in out if e["ph"] == "i" and e["s"] == "t"}
    assert {"down", "spawn", "stop"} <= markers


class Page(HTMLParser):
    """Collects a page's elements and text, and checks that its tags balance."""

    def __init__(self) -> None:
        super().__init__()
        self.open: list[str] = []
        self.elements: list[tuple[str, dict[str, str]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.elements.append((tag, {k: v or "" for k, v in attrs}))
        if tag not in VOID:
            self.open.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.elements.append((tag, {k: v or "" for k, v in attrs}))

    def handle_endtag(self, tag):
        assert self.open and self.open[-1] == tag, (self.open[-3:], tag)
        self.open.pop()

    def handle_data(self, data):
        self.text.append(data)

    def with_class(self, tag: str, name: str) -> list[dict[str, str]]:
        return [a for t, a in self.elements if t == tag and name in a.get("class", "").split()]


def parse(page: str) -> Page:
    parser = Page()
    parser.feed(page)
    parser.close()
    assert parser.open == []
    return parser


@pytest.mark.parametrize("cap", [2000, 40])
def test_html_sequence_diagram(events, cap):
    page = parse(to_html(events, "a <run> & its faults", max_messages=cap))
    text = "".join(page.text)
    assert "a <run> & its faults" in text
    assert not any(tag == "run" for tag, _ in page.elements)

    lifelines = [a["data-proc"] for a in page.with_class("line", "lifeline")]
    assert lifelines == procs(events)
    assert sorted(lifelines) == sorted(all_procs(events) - {"nemesis"})
    assert lifelines[0] == "root"
    assert len(page.with_class("svg", "diagram")) == 1

    arrows = page.with_class("g", "msg")
    assert len(arrows) == min(cap, received(events))
    assert ("messages are drawn" in text) == (received(events) > cap)
    for fault in (e for e in events if isinstance(e, FAULT_EVENTS)):
        assert fault.fault in text


def test_html_shows_faults_and_failures():
    page = parse(to_html(buggy_kv_seed_26(), "BuggyKV seed 26"))
    text = "".join(page.text)
    assert len(page.with_class("rect", "band")) == 3  # three faults healed
    assert len(page.with_class("line", "instant")) == 1  # the crash
    assert len(page.with_class("line", "skipped")) == 1
    assert len(page.with_class("g", "undelivered")) == 2
    assert "skipped: no worker procs on that host" in text
    assert "lost, failure, unhandled" in text
    assert sum(tag == "tr" for tag, _ in page.elements) == 1 + 5  # the faults table


def test_a_key_reused_after_a_restart_matches_in_order():
    """A restarted actor keeps its id and counts seq from 0 again."""
    send = {"proc": "root:1.0", "src": "m/w[0]", "seq": 0, "dst": "root", "port": 3, "bytes": 1}
    recv = {"proc": "root", "src": "m/w[0]", "seq": 0, "port": 3}
    events = [
        ev.ReplySent(t=0.0, **send, error=False),
        ev.ReplyReceived(t=0.1, **recv),
        ev.ReplySent(t=0.2, **send, error=True),
        ev.ReplyReceived(t=0.3, **recv),
    ]
    flows = [e for e in to_perfetto(events)["traceEvents"] if e["ph"] in "sf"]
    assert [(e["ph"], e["id"], e["name"], e["ts"]) for e in flows] == [
        ("s", 1, "reply", 0.5),
        ("f", 1, "reply", 100000.5),
        ("s", 2, "error reply", 200000.5),
        ("f", 2, "error reply", 300000.5),
    ]


def test_exports_are_deterministic(events, tmp_path):
    write_perfetto(events, tmp_path / "a.json")
    write_perfetto(events, tmp_path / "b.json")
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()
    assert json.loads((tmp_path / "a.json").read_text()) == to_perfetto(events)
    write_html(events, tmp_path / "a.html", "run")
    assert (tmp_path / "a.html").read_text() == to_html(events, "run") == to_html(events, "run")
