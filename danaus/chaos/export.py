"""Exporting a run's trace for people to look at.

A trace says everything about a run, but as a few thousand JSON lines it is
hard to see what happened around a fault. Two views help:

- `to_perfetto`: Chrome's JSON trace format, for ui.perfetto.dev or
  chrome://tracing: a zoomable timeline with one track per proc and an arrow
  per message.
- `to_html`: one self-contained page (inline CSS and SVG, nothing fetched)
  with the run as a sequence diagram, which can be attached to a bug report.
  `sequence_diagram` is the same diagram as a part of a page of one's own
  (a chaos run's report shows one per group of failures).
"""

from __future__ import annotations

import html
import json
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from danaus.chaos.nemesis import NEMESIS
from danaus.core import trace as ev
from danaus.core.trace import FAULT_EVENTS, Event
from danaus.core.transport import ROOT
from danaus.wording import counted


def _named(e: Event) -> tuple[str, ...]:
    """The procs an event involves: its own, and a send's destination."""
    return (e.proc, e.dst) if isinstance(e, ev.Sent) else (e.proc,)


def procs(events: Sequence[Event]) -> list[str]:
    """The procs of a run: the root first, then host agents, then workers by first appearance.

    The nemesis is not a proc: its faults concern the whole cluster.
    """
    seen = dict.fromkeys(p for e in events for p in _named(e) if p != NEMESIS)
    hosts = {e.host for e in events if isinstance(e, ev.Boot)}
    return sorted(seen, key=lambda p: (p != ROOT, p not in hosts))


def _messages(events: Sequence[Event]) -> tuple[list[tuple[int, int]], list[int]]:
    """Indices of the sends with their receipts, and of the sends never received, in send order.

    A send and its receipt share a key (`ev.message_key`). A restarted actor keeps
    its id and counts from seq 0 again, so a key can repeat: a receipt goes to the
    earliest send of its key still in flight. A call travelling along a cast's
    tree is drawn from its sender to its receiver, as if sent straight.
    """
    in_flight: dict[tuple[bool, str, int, str], deque[int]] = {}
    received: dict[int, int] = {}
    for i, e in enumerate(events):
        if isinstance(e, ev.Sent):
            in_flight.setdefault(ev.message_key(e), deque()).append(i)
        elif isinstance(e, ev.Received):
            queue = in_flight.get(ev.message_key(e))
            if queue:
                received[queue.popleft()] = i
    sends = [i for i, e in enumerate(events) if isinstance(e, ev.Sent)]
    delivered = [(i, received[i]) for i in sends if i in received]
    return delivered, [i for i in sends if i not in received]


def _label(e: Event) -> str:
    """A message's name: the method called, or what kind of answer it is."""
    if isinstance(e, ev.CallSent):
        return e.method
    if isinstance(e, ev.CallReceived):
        return "call"
    if isinstance(e, ev.ReplySent):
        return "error reply" if e.error else "reply"
    if isinstance(e, ev.ReplyReceived):
        return "reply"
    return "failure"


def _title(e: Event) -> str:
    """An event's kind and its first field: "down was killed", "fault t=1.2s crash ..."."""
    detail = next(iter(e.fields().values()), None)
    return e.kind if detail is None else f"{e.kind} {detail}"


def _fields(e: Event) -> str:
    return ", ".join(f"{k}={v}" for k, v in e.fields().items())


PID = 1
SLICE_US = 1.0


def _meta(name: str, tid: int, args: dict[str, Any]) -> dict[str, Any]:
    return {"ph": "M", "name": name, "pid": PID, "tid": tid, "ts": 0, "args": args}


def to_perfetto(events: Sequence[Event]) -> dict[str, Any]:
    """The run in Chrome's JSON trace format (timestamps in microseconds of simulated time).

    One process, "danaus", with a thread track per proc (and one for the nemesis).
    A message is a 1 µs slice where it is sent and another where it is received,
    joined by a flow arrow. Slices that would overlap on a track (a cast sends to
    several procs at the same instant) are laid end to end, so that each flow binds
    to its own slice, and a receipt's slice never starts before its send's: a burst
    may be drawn a few microseconds late. Every other event is an instant (faults,
    heals and skipped faults are global) whose args are the event's fields.
    """
    tracks = procs(events) + ([NEMESIS] if any(e.proc == NEMESIS for e in events) else [])
    tid = {p: n for n, p in enumerate(tracks, 1)}
    out = [_meta("process_name", 0, {"name": "danaus"})]
    for p, n in tid.items():
        out += [
            _meta("thread_name", n, {"name": p}),
            _meta("thread_sort_index", n, {"sort_index": n}),
        ]
    pairs = _messages(events)[0]
    flows = {
        i: (n, _label(events[send]))
        for n, (send, recv) in enumerate(pairs, 1)
        for i in (send, recv)
    }
    receipt = dict(pairs)
    free = dict.fromkeys(tid, 0.0)  # where the next slice may start on each track
    sent: dict[int, float] = {}  # a receipt's index: where its send's slice starts
    for i, e in enumerate(events):
        place = {"ts": round(e.t * 1e6, 3), "pid": PID, "tid": tid[e.proc]}
        args = json.loads(json.dumps(e.fields(), default=str))
        if not isinstance(e, (ev.Sent, ev.Received)):
            scope = "g" if isinstance(e, FAULT_EVENTS) else "t"
            out.append(
                {"ph": "i", "s": scope, "name": _title(e), "cat": e.kind, **place, "args": args}
            )
            continue
        place["ts"] = max(place["ts"], free[e.proc], sent.pop(i, 0.0))
        free[e.proc] = round(place["ts"] + SLICE_US, 3)
        if i in receipt:
            sent[receipt[i]] = place["ts"]
        flow, name = flows.get(i, (0, _label(e)))
        out.append(
            {"ph": "X", "name": name, "cat": "message", **place, "dur": SLICE_US, "args": args}
        )
        if flow:
            ph = {"ph": "s"} if isinstance(e, ev.Sent) else {"ph": "f", "bp": "e"}
            middle = round(place["ts"] + SLICE_US / 2, 3)  # inside its slice, so it binds to it
            out.append({**ph, "id": flow, "name": name, "cat": "message", **place, "ts": middle})
    return {"traceEvents": out, "displayTimeUnit": "ms"}


def write_perfetto(events: Sequence[Event], path: str | Path) -> None:
    """Write `to_perfetto` to ``path``: open it at ui.perfetto.dev."""
    with open(path, "w") as f:
        json.dump(to_perfetto(events), f, separators=(",", ":"))


MAX_MESSAGES = 2000
ROW = 16  # pixels between consecutive instants
IDLE = 0.01  # seconds: a longer pause between instants is marked, with extra room
IDLE_ROW = 14
COL = 120  # pixels between lifelines
LEFT = 96  # room for the time axis
NOTES = 440  # room for fault descriptions, right of the lifelines
HEAD = 40

# Markers on lifelines, most serious first (a shared dot takes the first one's colour).
MARKED: dict[type[Event], str] = {
    ev.Unhandled: "#b91c1c",
    ev.Fail: "#dc2626",
    ev.Failure: "#dc2626",
    ev.Down: "#111827",
    ev.Lost: "#ea580c",
    ev.Pause: "#ca8a04",
    ev.Resume: "#ca8a04",
    ev.Restart: "#16a34a",
    ev.Spawn: "#16a34a",
    ev.Stop: "#6b7280",
}
MARKS = {kind.__struct_config__.tag: colour for kind, colour in MARKED.items()}
"""The same colours by kind name."""
ARROWS = {"call": "#2563eb", "reply": "#059669", "error": "#d97706", "failure": "#dc2626"}
FAULT = "#9333ea"

CSS = f"""
body {{ font: 13px system-ui, sans-serif; margin: 16px; color: #111827; }}
h1 {{ font-size: 18px; margin: 0 0 6px; }}
p {{ margin: 4px 0; max-width: 1000px; }}
.cap {{ color: #b91c1c; font-weight: 600; }}
.legend span {{ margin-right: 14px; white-space: nowrap; }}
.legend svg {{ vertical-align: middle; }}
table {{ border-collapse: collapse; margin: 8px 0 16px; }}
td, th {{ border: 1px solid #d1d5db; padding: 2px 8px; text-align: left; }}
td.num {{ text-align: right; font-variant-numeric: tabular-nums; }}
svg.head {{ position: sticky; top: 0; background: #fff; border-bottom: 1px solid #d1d5db; }}
svg text {{ font: 10px ui-monospace, monospace; }}
.name {{ font-weight: 600; font-size: 11px; }}
.host, .time, .idle {{ fill: #6b7280; font-size: 9px; }}
.lifeline {{ stroke: #9ca3af; stroke-width: 1; }}
.paused {{ stroke: {MARKS["pause"]}; stroke-width: 5; stroke-dasharray: 2 2; }}
.idle-line {{ stroke: #d1d5db; stroke-dasharray: 6 4; }}
.msg line, .msg path {{ fill: none; stroke-width: 1; }}
.msg text, .mark text {{ font-size: 9px; paint-order: stroke; stroke: #fff; stroke-width: 3px; }}
.band {{ fill: {FAULT}; fill-opacity: 0.08; stroke: {FAULT}; stroke-opacity: 0.5; }}
.instant {{ stroke: {FAULT}; stroke-width: 1.5; }}
.skipped {{ stroke: #9ca3af; stroke-dasharray: 3 3; }}
.note {{ fill: {FAULT}; font-size: 9px; }}
.note.skip {{ fill: #6b7280; }}
.undelivered line {{ stroke-dasharray: 2 2; }}
"""


@dataclass
class _Fault:
    start: float
    fault: str
    end: float | None = None
    skipped: str | None = None

    @property
    def outcome(self) -> str:
        if self.skipped is not None:
            return f"skipped: {self.skipped}"
        return "applied, never healed" if self.end is None else f"healed at {self.end:.6f} s"


def _faults(events: Sequence[Event]) -> list[_Fault]:
    """The nemesis's faults in order, each with its heal time (a heal names its fault)."""
    faults: list[_Fault] = []
    unhealed: dict[str, _Fault] = {}
    for e in events:
        if isinstance(e, ev.FaultApplied):
            unhealed[e.fault] = _Fault(e.t, e.fault)
            faults.append(unhealed[e.fault])
        elif isinstance(e, ev.FaultHealed) and e.fault in unhealed:
            unhealed.pop(e.fault).end = e.t
        elif isinstance(e, ev.FaultSkipped):
            faults.append(_Fault(e.t, e.fault, skipped=e.why))
    return faults


def _rows(times: list[float]) -> tuple[dict[float, int], list[tuple[int, float]], int]:
    """Each instant's y, the idle gaps (y, seconds) and the height: one row per instant."""
    ys: dict[float, int] = {}
    gaps: list[tuple[int, float]] = []
    y = HEAD // 2
    for n, t in enumerate(times):
        if n:
            y += ROW
            if t - times[n - 1] > IDLE:
                gaps.append((y + IDLE_ROW // 2 - ROW // 2, t - times[n - 1]))
                y += IDLE_ROW
        ys[t] = y
    return ys, gaps, y + ROW


def _swatch(colour: str, shape: str = "line") -> str:
    if shape == "dot":
        return f'<svg width="12" height="12"><circle cx="6" cy="6" r="4" fill="{colour}"/></svg>'
    if shape == "band":
        return (
            f'<svg width="22" height="12"><rect x="0" y="1" width="22" height="10" fill="{colour}" '
            f'fill-opacity="0.15" stroke="{colour}" stroke-opacity="0.5"/></svg>'
        )
    return (
        f'<svg width="22" height="12"><line x1="0" y1="6" x2="22" y2="6" stroke="{colour}" '
        'stroke-width="2"/></svg>'
    )


def _fault_layer(faults: list[_Fault], y: dict[float, int], width: int, notes_x: int) -> list[str]:
    """A band from each fault to its heal (a line if it has none), described on the right."""
    out, note_y = [], 0
    for f in faults:
        top = y[f.start]
        out.append(f"<g><title>{html.escape(f'{f.fault} ({f.outcome})')}</title>")
        if f.end is not None:
            out.append(
                f'<rect class="band" x="{LEFT}" y="{top}" width="{width - LEFT}" '
                f'height="{max(y[f.end] - top, 2)}"/>'
            )
        else:
            shape = "instant" if f.skipped is None else "skipped"
            out.append(f'<line class="{shape}" x1="{LEFT}" y1="{top}" x2="{width}" y2="{top}"/>')
        note_y = max(top + 10, note_y + 12)  # notes of nearby faults do not overlap
        note = "note" if f.skipped is None else "note skip"
        out.append(
            f'<text class="{note}" x="{notes_x + 8}" y="{note_y}">{html.escape(f.fault)}</text></g>'
        )
    return out


def _message_layer(
    events: Sequence[Event],
    drawn: list[tuple[int, int]],
    undelivered: list[int],
    x: dict[str, int],
    y: dict[float, int],
    ids: str,
) -> list[str]:
    """An arrow per received message, labelled; a stub ending in a cross per message lost."""
    out = []
    for s, r in drawn:
        send, recv = events[s], events[r]
        label = _label(send)
        kind = "error" if label == "error reply" else label if label in ARROWS else "call"
        x1, y1, x2, y2 = x[send.proc], y[send.t], x[recv.proc], y[recv.t]
        tip = (
            f"{label}: {send.proc} → {recv.proc}\n"
            f"sent at {send.t:.6f} s ({_fields(send)})\nreceived at {recv.t:.6f} s"
        )
        style = f'stroke="{ARROWS[kind]}" marker-end="url(#{ids}-arrow-{kind})"'
        out.append(f'<g class="msg {kind}"><title>{html.escape(tip)}</title>')
        if x1 == x2:
            out.append(f'<path d="M{x1},{y1} h18 V{max(y2, y1 + 6)} h-16" {style}/>')
            lx, ly = x1 + 22, y1 + 6
        else:
            out.append(f'<line x1="{x1}" y1="{y1}" x2="{x2}" y2="{y2}" {style}/>')
            lx, ly = x1 + (x2 - x1) // 4, y1 + (y2 - y1) // 4 - 2
        out.append(
            f'<text x="{lx}" y="{ly}" text-anchor="middle" fill="{ARROWS[kind]}">'
            f"{html.escape(label)}</text></g>"
        )
    lost = ARROWS["failure"]
    for s in undelivered:
        send = events[s]
        assert isinstance(send, ev.Sent)
        x1, y1 = x[send.proc], y[send.t]
        x2 = x1 + (30 if x[send.dst] >= x1 else -30)
        tip = f"{_label(send)}: {send.proc} → {send.dst}, never received\n{_fields(send)}"
        out.append(
            f'<g class="undelivered"><title>{html.escape(tip)}</title><line x1="{x1}" y1="{y1}" '
            f'x2="{x2}" y2="{y1}" stroke="{lost}"/>'
            f'<text x="{x2}" y="{y1 + 4}" text-anchor="middle" fill="{lost}">&#215;</text></g>'
        )
    return out


def _mark_layer(marks: list[Event], x: dict[str, int], y: dict[float, int]) -> list[str]:
    """A dot (a cross for ``down``) per proc and instant with something to mark, named."""
    groups: dict[tuple[str, float], list[Event]] = {}
    for e in marks:
        groups.setdefault((e.proc, e.t), []).append(e)
    out = []
    for (p, t), group in groups.items():
        kinds = list(dict.fromkeys(e.kind for e in group))
        colour = MARKS[min(kinds, key=list(MARKS).index)]
        tip = "\n".join([f"{p} at {t:.6f} s", *(f"{e.kind} ({_fields(e)})" for e in group)])
        cx, cy = x[p], y[t]
        if "down" in kinds:
            shape = (
                f'<path d="M{cx - 5},{cy - 5} l10,10 m0,-10 l-10,10" stroke="{colour}" '
                'stroke-width="2"/>'
            )
        else:
            shape = f'<circle cx="{cx}" cy="{cy}" r="4" fill="{colour}"/>'
        out.append(
            f'<g class="mark"><title>{html.escape(tip)}</title>{shape}<text x="{cx + 8}" '
            f'y="{cy + 3}" fill="{colour}">{html.escape(", ".join(kinds))}</text></g>'
        )
    return out


def _legend() -> str:
    entries = [
        (_swatch(ARROWS["call"]), "call"),
        (_swatch(ARROWS["reply"]), "reply"),
        (_swatch(ARROWS["error"]), "error reply"),
        (_swatch(ARROWS["failure"]), "failure report, or message never received"),
        (_swatch(FAULT, "band"), "fault until healed"),
        (_swatch(FAULT), "fault without heal"),
        (_swatch("#9ca3af"), "fault skipped"),
        (_swatch(MARKS["pause"]), "paused"),
        (_swatch(MARKS["fail"], "dot"), "fail, failure, unhandled"),
        (_swatch(MARKS["lost"], "dot"), "lost a peer"),
        (_swatch(MARKS["down"]), "down (the lifeline ends)"),
        (_swatch(MARKS["spawn"], "dot"), "spawn, restart"),
        (_swatch(MARKS["stop"], "dot"), "stop"),
    ]
    return " ".join(f"<span>{swatch} {name}</span>" for swatch, name in entries)


def _fault_table(faults: list[_Fault]) -> str:
    if not faults:
        return "<p>No faults.</p>"
    rows = "".join(
        f'<tr><td class="num">{f.start:.6f}</td><td>{html.escape(f.fault)}</td>'
        f"<td>{html.escape(f.outcome)}</td></tr>"
        for f in faults
    )
    return f"<table><tr><th>at (s)</th><th>fault</th><th>outcome</th></tr>{rows}</table>"


def to_html(
    events: Sequence[Event], title: str = "Danaus trace", max_messages: int = MAX_MESSAGES
) -> str:
    """The run as a sequence diagram (`sequence_diagram`) on one self-contained HTML page."""
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{CSS}</style></head><body>\n"
        f"<h1>{html.escape(title)}</h1>{sequence_diagram(events, max_messages)}</body></html>\n"
    )


def sequence_diagram(
    events: Sequence[Event], max_messages: int = MAX_MESSAGES, ids: str = "run"
) -> str:
    """The run as a sequence diagram: HTML to place on a page styled with `CSS`.

    It holds a line of figures, the legend, the table of faults and the diagram.
    ``ids`` prefixes the ids the diagram defines, so that several can share a page.
    One lifeline per proc (the root, host agents, then workers by first appearance),
    from its first event to its ``down``. Time flows down by rank, not to scale:
    each distinct instant gets its own row, labelled with its time, so bursts a few
    microseconds apart stay as readable as pauses of seconds; idle stretches longer
    than 10 ms are marked with a dashed line and their length. An arrow per received
    message (the first ``max_messages`` of them; the page says when there were more),
    a stub per message never received, marks for failures, losses, pauses, restarts,
    spawns and stops, and a band across the diagram from each fault to its heal (a
    line for faults without one). Hovering over an element shows its details.
    """
    delivered, undelivered = _messages(events)
    drawn = delivered[:max_messages]
    if len(drawn) < len(delivered):  # past the cap, lost messages are left out too
        undelivered = [i for i in undelivered if drawn and i < drawn[-1][0]]
    marks = [e for e in events if type(e) in MARKED]
    faults = _faults(events)
    lanes = procs(events)
    host_of = {e.proc: e.host for e in events if isinstance(e, ev.Boot)}
    first: dict[str, float] = {}
    for e in events:
        for p in _named(e):
            first.setdefault(p, e.t)
    down = {e.proc: e.t for e in events if isinstance(e, ev.Down)}
    paused: list[tuple[str, float, float | None]] = []
    pausing: dict[str, float] = {}
    for e in events:
        if isinstance(e, ev.Pause):
            pausing[e.proc] = e.t
        elif isinstance(e, (ev.Resume, ev.Down)) and e.proc in pausing:
            paused.append((e.proc, pausing.pop(e.proc), e.t))
    paused += [(p, t, None) for p, t in pausing.items()]

    times = {events[i].t for pair in drawn for i in pair}
    times |= {events[i].t for i in undelivered} | {e.t for e in marks}
    times |= {f.start for f in faults} | {f.end for f in faults if f.end is not None}
    times |= {first[p] for p in lanes} | set(down.values())
    y, gaps, height = _rows(sorted(times))
    x = {p: LEFT + COL * n + COL // 2 for n, p in enumerate(lanes)}
    notes_x = LEFT + COL * len(lanes)
    width = notes_x + NOTES

    head = [f'<svg class="head" width="{width}" height="{HEAD}">']
    for p in lanes:
        role = "host agent" if host_of.get(p) == p else f"on {host_of[p]}" if p in host_of else ""
        head.append(
            f'<text class="name" x="{x[p]}" y="16" text-anchor="middle">{html.escape(p)}</text>'
            f'<text class="host" x="{x[p]}" y="30" text-anchor="middle">{html.escape(role)}</text>'
        )
    head.append(f'<text class="name" x="{notes_x + 8}" y="16">faults</text></svg>')

    svg = [f'<svg class="diagram" width="{width}" height="{height}"><defs>']
    for kind, colour in ARROWS.items():
        svg.append(
            f'<marker id="{ids}-arrow-{kind}" viewBox="0 0 8 8" refX="8" refY="4" markerWidth="7" '
            f'markerHeight="7" orient="auto"><path d="M0,0 L8,4 L0,8 z" fill="{colour}"/></marker>'
        )
    svg.append("</defs>")
    svg += _fault_layer(faults, y, width, notes_x)
    for gap_y, seconds in gaps:
        svg.append(
            f'<line class="idle-line" x1="0" y1="{gap_y}" x2="{width}" y2="{gap_y}"/>'
            f'<text class="idle" x="4" y="{gap_y - 2}">idle {seconds:.3f} s</text>'
        )
    for t, row in y.items():
        svg.append(
            f'<text class="time" x="{LEFT - 8}" y="{row + 3}" text-anchor="end">{t:.6f}</text>'
        )
    for p in lanes:
        bottom = y[down[p]] if p in down else height
        svg.append(
            f'<line class="lifeline" data-proc="{html.escape(p)}" x1="{x[p]}" y1="{y[first[p]]}" '
            f'x2="{x[p]}" y2="{bottom}"/>'
        )
    for p, start, end in paused:
        svg.append(
            f'<line class="paused" x1="{x[p]}" y1="{y[start]}" x2="{x[p]}" '
            f'y2="{height if end is None else y[end]}"><title>paused</title></line>'
        )
    svg += _message_layer(events, drawn, undelivered, x, y, ids)
    svg += _mark_layer(marks, x, y)
    svg.append("</svg>")

    applied = sum(f.skipped is None for f in faults)
    summary = (
        f"{counted(len(lanes), 'proc')}, {counted(len(delivered), 'message')} received and "
        f"{len(undelivered):,} never received, {counted(applied, 'fault')} applied and "
        f"{len(faults) - applied:,} skipped. "
        "Time flows down, one row per instant (not to scale). Hover for details."
    )
    cap = (
        f'<p class="cap">Only the first {len(drawn):,} of {len(delivered):,} received messages '
        "are drawn.</p>"
        if len(drawn) < len(delivered)
        else ""
    )
    diagram = "\n".join(svg)
    return (
        f"<p>{html.escape(summary)}</p>{cap}\n"
        f'<p class="legend">{_legend()}</p>\n{_fault_table(faults)}\n'
        f"<div>{''.join(head)}\n{diagram}</div>\n"
    )


def write_html(
    events: Sequence[Event],
    path: str | Path,
    title: str = "Danaus trace",
    max_messages: int = MAX_MESSAGES,
) -> None:
    """Write `to_html` to ``path``: a page to open in any browser or attach to a report."""
    Path(path).write_text(to_html(events, title, max_messages))
