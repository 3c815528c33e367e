"""Where the time of one call goes: a round trip split into its stages, from the job's trace.

Runs sequential ``call_one`` round trips to one actor with the trace on, and
matches each call's events: the caller issuing it, the message leaving the
caller's proc (``send-call``), reaching the actor's proc (``recv-call``), the
answer leaving it (``send-reply``), reaching the caller's proc
(``recv-reply``), and ``get()`` returning. All processes share this host's
monotonic clock, so the stages of one call can be subtracted across them.

Prints one JSON line per stage (median and p90 in µs), one for the whole
round trip with the trace on and off (recording costs a little), and one for
the CPU time each of the two processes spends per round trip (user and
system, every thread counted). With ``--bind``, every thread of the caller's
process runs on one CPU and every thread of the actor's process on another
(and ``home_cpus=False``), which shows what the threads' moving between CPUs
costs; ``--no-home-cpus`` configures the transport with ``home_cpus=False``
(`danaus.core.home_cpu`), and ``--wait-spin-us N`` with ``wait_spin_us=N``
(`danaus.core.awake`; 0: every wait sleeps at once, and the CPU times count no
polling). Never fails on speed.

    .venv/bin/python benchmarks/hot_path.py                    # tcp
    .venv/bin/python benchmarks/hot_path.py --transport ucx --calls 500
    .venv/bin/python benchmarks/hot_path.py --no-encrypt        # authenticated, in clear
    .venv/bin/python benchmarks/hot_path.py --bind              # each process on a CPU of its own
    .venv/bin/python benchmarks/hot_path.py --no-home-cpus      # every thread left to the kernel
    .venv/bin/python benchmarks/hot_path.py --wait-spin-us 0    # every wait sleeps at once
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

import msgspec

import danaus
from danaus import Actor, endpoint, this_host
from danaus.core.settings import JobOptions

WAIT_SPIN_US = JobOptions().wait_spin_us

STAGES = (
    ("issue", "send-call", "the caller's proc encodes and sends the call"),
    ("send-call", "recv-call", "the call crosses to the actor's proc and its loop reads it"),
    ("recv-call", "send-reply", "the actor's proc runs the endpoint and sends the answer"),
    ("send-reply", "recv-reply", "the answer crosses back and the caller's loop reads it"),
    ("recv-reply", "returned", "the waiting caller wakes with the result"),
)


def _cpu_seconds() -> tuple[float, float]:
    """User and system CPU seconds of this whole process, every thread counted."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime, usage.ru_stime


def _bind(cpus: set[int]) -> None:
    """Have every thread of this process run on ``cpus`` alone."""
    for thread in os.listdir("/proc/self/task"):
        os.sched_setaffinity(int(thread), cpus)


class Echo(Actor):
    @endpoint
    def echo(self, x: int) -> int:
        return x


class Meter(Actor):
    """Beside `Echo` in its proc: reads and places the proc's threads, with answers of its own
    (the stages are matched by the echo mesh's answers)."""

    @endpoint
    def cpu_seconds(self) -> tuple[float, float]:
        return _cpu_seconds()

    @endpoint
    def bind(self, cpu: int) -> None:
        _bind({cpu})


class Measured:
    """What one run of round trips gave: each call's times, and CPU seconds per call."""

    def __init__(self) -> None:
        self.times: list[tuple[float, float]] = []
        self.cpu_us: dict[str, float] = {}


def _round_trips(calls: int, warmup: int, cpus: tuple[int, int] | None) -> Measured:
    procs = this_host().spawn_procs({"gpus": 1})
    mesh = procs.spawn("echo", Echo)
    meter = procs.spawn("meter", Meter)
    if cpus is not None:
        _bind({cpus[0]})
        meter.bind.call_one(cpus[1]).get(timeout=60)
    for i in range(warmup):
        mesh.echo.call_one(i).get(timeout=60)
    clock = time.monotonic
    measured = Measured()
    actor_before, caller_before = meter.cpu_seconds.call_one().get(timeout=60), _cpu_seconds()
    for i in range(calls):
        issued = clock()
        mesh.echo.call_one(i).get(timeout=60)
        measured.times.append((issued, clock()))
    caller_after, actor_after = _cpu_seconds(), meter.cpu_seconds.call_one().get(timeout=60)
    for side, before, after in (
        ("caller", caller_before, caller_after),
        ("actor_proc", actor_before, actor_after),
    ):
        for kind, start, end in zip(("user", "system"), before, after, strict=True):
            measured.cpu_us[f"{side}_{kind}_us"] = round((end - start) * 1e6 / calls, 1)
    return measured


def _measure(
    transport: str,
    calls: int,
    warmup: int,
    trace: str | None,
    cpus: tuple[int, int] | None,
    **options: object,
) -> Measured:
    danaus.configure(transport=transport, trace=trace if trace else False, **options)
    allowed = os.sched_getaffinity(0)
    try:
        return _round_trips(calls, warmup, cpus)
    finally:
        danaus.shutdown()
        if cpus is not None:
            _bind(allowed)


def _two_cpus() -> tuple[int, int]:
    """Two CPUs this process may use (the same one twice on a machine with one)."""
    allowed = sorted(os.sched_getaffinity(0))
    return allowed[0], allowed[-1]


def _stages(path: Path, times: list[tuple[float, float]]) -> dict[str, list[float]]:
    """Each call's stage times (µs), from the trace's events of the last ``len(times)`` calls."""
    events = [msgspec.json.decode(line) for line in path.read_bytes().splitlines() if line]
    calls_sent = [e for e in events if e["kind"] == "send-call" and e.get("method") == "echo"]
    calls_sent = calls_sent[-len(times) :]
    # Calls are numbered per pair of procs: their receiver is part of their name.
    names = {(e["src"], e["seq"], e["dst"]) for e in calls_sent}
    received = {(e["src"], e["seq"], e["proc"]): e["t"] for e in events if e["kind"] == "recv-call"}
    mesh = next(e["actor"] for e in calls_sent)
    replies_sent = [
        e for e in events if e["kind"] == "send-reply" and e["src"].startswith(f"{mesh}/")
    ]
    replies_sent = replies_sent[-len(times) :]
    replies_received = {(e["src"], e["seq"]): e["t"] for e in events if e["kind"] == "recv-reply"}
    stages: dict[str, list[float]] = {f"{a}->{b}": [] for a, b, _ in STAGES}
    for (issued, returned), call, reply in zip(times, calls_sent, replies_sent, strict=True):
        key = (call["src"], call["seq"], call["dst"])
        if key not in names or key not in received:
            continue
        points = {
            "issue": issued,
            "send-call": call["t"],
            "recv-call": received[key],
            "send-reply": reply["t"],
            "recv-reply": replies_received.get((reply["src"], reply["seq"]), float("nan")),
            "returned": returned,
        }
        for a, b, _ in STAGES:
            stages[f"{a}->{b}"].append((points[b] - points[a]) * 1e6)
    return stages


def _summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(v for v in values if v == v)
    return {
        "median_us": round(statistics.median(ordered), 1),
        "p90_us": round(ordered[int(0.9 * (len(ordered) - 1))], 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transport", default="tcp")
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument(
        "--no-encrypt", action="store_true", help="configure the transport with encrypt=False"
    )
    parser.add_argument(
        "--bind",
        action="store_true",
        help="run every thread of the caller's process on one CPU, the actor's on another "
        "(with home_cpus=False)",
    )
    parser.add_argument(
        "--no-home-cpus",
        action="store_true",
        help="configure the transport with home_cpus=False: every thread left to the kernel",
    )
    parser.add_argument(
        "--wait-spin-us",
        type=int,
        default=WAIT_SPIN_US,
        help=f"configure the transport with this wait_spin_us (default {WAIT_SPIN_US})",
    )
    args = parser.parse_args(argv)
    options: dict[str, object] = {"encrypt": False} if args.no_encrypt else {}
    options["wait_spin_us"] = args.wait_spin_us
    if args.no_home_cpus or args.bind:
        options["home_cpus"] = False
    cpus = _two_cpus() if args.bind else None
    base = {
        "transport": args.transport,
        "calls": args.calls,
        "encrypt": not args.no_encrypt,
        "bound": args.bind,
        "home_cpus": not (args.no_home_cpus or args.bind),
        "wait_spin_us": args.wait_spin_us,
    }
    untraced = _measure(args.transport, args.calls, args.warmup, None, cpus, **options)
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "trace.jsonl"
        traced = _measure(args.transport, args.calls, args.warmup, str(path), cpus, **options)
        stages = _stages(path, traced.times)
    for name, measured in (("round_trip", untraced), ("round_trip_traced", traced)):
        round_trips = [(b - a) * 1e6 for a, b in measured.times]
        print(json.dumps({"workload": name, **base, **_summary(round_trips)}), flush=True)
    print(json.dumps({"workload": "cpu_per_round_trip", **base, **untraced.cpu_us}), flush=True)
    described = {f"{a}->{b}": what for a, b, what in STAGES}
    for stage, values in stages.items():
        line = {"workload": "stage", "stage": stage, **base, **_summary(values)}
        print(json.dumps({**line, "what": described[stage]}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
