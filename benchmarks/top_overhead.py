"""What watching a job with `danaus top` costs it: throughput with and without snapshots.

A job of ``--procs`` worker procs (64 by default), one actor each, runs a
workload for ``--seconds`` at a time: the controller casts a small call to
every actor and gathers the answers, again and again (each actor spins for
``--work-us`` microseconds per call). Phases alternate: without a watcher, then
with one (a separate process asking the job's admin socket for a snapshot every
``--interval`` seconds, as `danaus top` does; the phase starts once it has
connected), ``--rounds`` times each. Prints
one JSON line: the median rounds per second of each phase with their spread,
the slowdown in percent (median of the paired phases), and how long snapshots
took (median and max ``gather_seconds``, and the largest gap between two
snapshots the watcher received, which must stay under the refresh interval).

Throughput on a shared machine swings by more than the effect measured, so the
line also carries the figure that does not depend on what else runs: the CPU
time the whole job (controller and every worker, from /proc) spends per
snapshot, measured over ``--snapshots`` snapshots of the idle job taken back to
back, and what that is at one snapshot per second in percent of one core.

    python benchmarks/top_overhead.py                     # 64 procs, 3 rounds of 10 s
    python benchmarks/top_overhead.py --procs 8 --seconds 2 --rounds 1   # a smoke test

Nothing here asserts on speed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import danaus
from danaus import Actor, endpoint, this_host

BURST = """
import sys
from danaus.admin import jobfile, protocol
from danaus.transports.tcp.admin import AdminClient

with AdminClient(jobfile.find()) as client:
    client.ask(protocol.Snapshot(), timeout=60)
    print("ready", flush=True)
    sys.stdin.readline()
    for _ in range(int(sys.argv[1])):
        client.ask(protocol.Snapshot(), timeout=60)
"""

WATCHER = """
import json, select, sys, time
from danaus.admin import jobfile, protocol
from danaus.transports.tcp.admin import AdminClient

interval = float(sys.argv[1])
gathers, received = [], []
with AdminClient(jobfile.find()) as client:
    view = client.ask(protocol.Snapshot(), timeout=60)
    print("ready", flush=True)
    while True:
        started = time.monotonic()
        view = client.ask(protocol.Snapshot(), timeout=30)
        received.append(time.monotonic())
        gathers.append(view.gather_seconds)
        wait = max(0.0, interval - (time.monotonic() - started))
        if select.select([sys.stdin], [], [], wait)[0]:
            break
gaps = [b - a for a, b in zip(received, received[1:])]
print(json.dumps({"gathers": gathers, "gaps": gaps, "procs": len(view.procs)}))
"""


class Spinner(Actor):
    @endpoint
    def pid(self) -> int:
        return os.getpid()

    @endpoint
    def spin(self, micros: int) -> int:
        until = time.perf_counter() + micros / 1e6
        while time.perf_counter() < until:
            pass
        return 1


def rounds_per_second(spinners: object, seconds: float, work_us: int) -> float:
    count = 0
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        spinners.spin.call(work_us).get(timeout=60)
        count += 1
    return count / (time.perf_counter() - started)


def cpu_seconds(pids: list[int]) -> float:
    """CPU time the threads of the processes ``pids`` have run so far."""
    return sum(cpu_by_process(pids).values())


def cpu_by_process(pids: list[int]) -> dict[int, float]:
    """CPU seconds each process of ``pids`` that still runs has used so far.

    From each thread's ``schedstat`` (nanoseconds): ``stat``'s clock ticks are
    10 ms, coarser than a few snapshots of a small job cost.
    """
    found = {}
    for pid in pids:
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except FileNotFoundError:  # it ended
            continue
        total = 0
        for task in tasks:
            try:
                with open(f"/proc/{pid}/task/{task}/schedstat") as stat:
                    total += int(stat.read().split()[0])
            except FileNotFoundError:
                continue
        found[pid] = total / 1e9
    return found


def cpu_per_snapshot(spinners: object, snapshots: int, jobs: str) -> float:
    """The job's CPU seconds per snapshot, over ``snapshots`` asked back to back."""
    pids = [os.getpid(), *spinners.pid.call().get(timeout=60).values()]
    burst = subprocess.Popen(
        [sys.executable, "-c", BURST, str(snapshots)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "DANAUS_JOBS_DIR": jobs},
    )
    assert burst.stdout is not None and burst.stdin is not None
    if burst.stdout.readline().strip() != "ready":
        raise SystemExit("the watcher could not reach the job")
    before = cpu_seconds(pids)
    burst.communicate("go\n", timeout=600)
    return (cpu_seconds(pids) - before) / snapshots


def spread(values: list[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(values), 2),
        "min": round(min(values), 2),
        "max": round(max(values), 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--procs", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each phase")
    parser.add_argument("--rounds", type=int, default=3, help="phases of each kind")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between snapshots")
    parser.add_argument("--work-us", type=int, default=200, help="each call's spin, microseconds")
    parser.add_argument("--snapshots", type=int, default=50, help="for the CPU cost of one")
    parser.add_argument(
        "--heartbeat-timeout",
        type=float,
        default=30.0,
        help="seconds (starting 64 procs on a small, busy machine starves heartbeats)",
    )
    args = parser.parse_args(argv)

    jobs = tempfile.mkdtemp(prefix="danaus-jobs-")
    os.environ["DANAUS_JOBS_DIR"] = jobs
    danaus.configure(
        transport="tcp", heartbeat_interval=1.0, heartbeat_timeout=args.heartbeat_timeout
    )
    procs = this_host().spawn_procs(per_host={"procs": args.procs})
    spinners = procs.spawn("spinner", Spinner)
    spinners.spin.call(0).get(timeout=300)
    rounds_per_second(spinners, min(2.0, args.seconds), args.work_us)
    per_snapshot = [cpu_per_snapshot(spinners, args.snapshots, jobs) for _ in range(3)]

    plain: list[float] = []
    watched: list[float] = []
    gathers: list[float] = []
    gaps: list[float] = []
    for _ in range(args.rounds):
        plain.append(rounds_per_second(spinners, args.seconds, args.work_us))
        watcher = subprocess.Popen(
            [sys.executable, "-c", WATCHER, str(args.interval)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "DANAUS_JOBS_DIR": jobs},
        )
        assert watcher.stdout is not None
        if watcher.stdout.readline().strip() != "ready":
            raise SystemExit("the watcher could not reach the job")
        watched.append(rounds_per_second(spinners, args.seconds, args.work_us))
        out, _ = watcher.communicate("stop\n", timeout=120)
        seen = json.loads(out)
        gathers += seen["gathers"]
        gaps += seen["gaps"]
        procs_seen = seen["procs"]
    slowdowns = [100 * (p - w) / p for p, w in zip(plain, watched)]
    print(
        json.dumps(
            {
                "benchmark": "top_overhead",
                "procs": args.procs,
                "procs_in_snapshot": procs_seen,
                "seconds_per_phase": args.seconds,
                "rounds": args.rounds,
                "interval_s": args.interval,
                "work_us": args.work_us,
                "plain_rounds_per_s": spread(plain),
                "watched_rounds_per_s": spread(watched),
                "slowdown_percent": spread(slowdowns),
                "snapshot_gather_s": {
                    "median": round(statistics.median(gathers), 4),
                    "max": round(max(gathers), 4),
                },
                "longest_gap_between_snapshots_s": round(max(gaps), 3) if gaps else None,
                "job_cpu_ms_per_snapshot": spread([1000 * c for c in per_snapshot]),
                "job_cpu_percent_of_one_core_at_interval": round(
                    100 * statistics.median(per_snapshot) / args.interval, 2
                ),
                "snapshots": len(gathers),
            }
        )
    )
    danaus.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
