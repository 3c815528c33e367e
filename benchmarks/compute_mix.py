"""A mixed workload: several procs per core, each computing with torch while they message.

Runs the reinforcement-learning pipeline of `_rl_pipeline.py` (seven procs, four of which
compute without pause) as a program of its own, and reports how long it took to be ready, to
train, and to end, with the CPU of every process it started. Nothing here asserts on speed.

    python benchmarks/compute_mix.py                      # Danaus over tcp, one run
    python benchmarks/compute_mix.py --transport ucx      # any transport Danaus knows
    python benchmarks/compute_mix.py --peer monarch --rounds 3
                                                          # alternating with Monarch, medians

Prints one JSON line per framework: the medians of ``ready_s``, ``first_step_s``,
``last_step_s``, ``done_s`` (seconds from the program's start, see `_rl_pipeline.py`),
``train_s`` (first step to last), ``wall_s`` (until the program's process ended) and
``cpu_s`` (user and system time of the program and every process it started, gathered by
making this process their subreaper), each with its runs, and ``left_running``, the processes
still alive once the program had ended (they are killed). With ``--peer monarch``, Monarch
runs from ``benchmarks/.monarch-venv`` (made on first use unless ``--no-install``), its runs
alternating with Danaus's, and a last line gives the ratios Danaus / Monarch.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
from _monarch import log, monarch_python

HERE = Path(__file__).resolve().parent
PROGRAM = HERE / "_rl_pipeline.py"
PR_SET_CHILD_SUBREAPER = 36
FIGURES = ("ready_s", "first_step_s", "last_step_s", "done_s", "train_s", "wall_s", "cpu_s")
REAP_TIMEOUT = 10.0
"""Seconds the program's last processes get to end by themselves once it has ended."""


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _reap_all(deadline: float) -> int:
    """Reap every descendant left (this process is their subreaper); how many were still
    running at ``deadline`` and had to be killed."""
    killed = 0
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return killed
        if pid:
            continue
        if time.monotonic() > deadline:
            for child in psutil.Process().children(recursive=True):
                killed += 1
                child.send_signal(signal.SIGKILL)
            deadline = float("inf")
        time.sleep(0.05)


def run_once(python: str, framework: str, env: dict[str, str], steps: int) -> dict[str, Any]:
    before = _children_cpu()
    start = time.monotonic()
    done = subprocess.run(
        [python, str(PROGRAM), "--framework", framework, "--steps", str(steps)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    wall = time.monotonic() - start
    left = _reap_all(time.monotonic() + REAP_TIMEOUT)
    cpu = _children_cpu() - before
    rows = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not rows:
        tail = " | ".join(done.stderr.strip().splitlines()[-3:])
        return {"error": f"exit code {done.returncode}: {tail}", "left_running": left}
    result = json.loads(rows[-1])
    result["train_s"] = round(result["last_step_s"] - result["first_step_s"], 3)
    result["wall_s"] = round(wall, 3)
    result["cpu_s"] = round(cpu, 3)
    result["left_running"] = left
    return result


def summary(framework: str, labels: dict[str, Any], runs: list[dict[str, Any]]) -> dict[str, Any]:
    good = [run for run in runs if "error" not in run]
    row: dict[str, Any] = {"workload": "compute_mix", "framework": framework, **labels}
    row["runs"] = len(runs)
    row["left_running"] = sum(run["left_running"] for run in runs)
    errors = [run["error"] for run in runs if "error" in run]
    if errors:
        row["errors"] = errors
    for figure in FIGURES:
        values = [run[figure] for run in good]
        if values:
            row[figure] = round(statistics.median(values), 3)
            row[f"{figure}_runs"] = values
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--transport", default="tcp", help="Danaus transport (default tcp)")
    parser.add_argument("--steps", type=int, default=20, help="learner steps (default 20)")
    parser.add_argument("--rounds", type=int, default=1, help="runs of each framework (default 1)")
    parser.add_argument("--wait-spin-us", type=int, help="Danaus's wait_spin_us for the run")
    parser.add_argument("--peer", choices=["monarch"], help="also run Monarch, alternating")
    parser.add_argument("--monarch-python", help="a python that has torchmonarch")
    parser.add_argument("--no-install", action="store_true", help="never make the Monarch venv")
    args = parser.parse_args(argv)
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        log("cannot become a subreaper: cpu_s counts only what the program reaped itself")
    env = {**os.environ, "DANAUS_TRANSPORT": args.transport, "PYTHONUNBUFFERED": "1"}
    labels: dict[str, Any] = {"transport": args.transport}
    if args.wait_spin_us is not None:
        env["DANAUS_WAIT_SPIN_US"] = str(args.wait_spin_us)
        labels["wait_spin_us"] = args.wait_spin_us
    peer = None
    if args.peer:
        peer, error = monarch_python(args.monarch_python, install=not args.no_install)
        if peer is None:
            print(json.dumps({"workload": "compute_mix", "framework": "monarch", "error": error}))
    peer_env = {k: v for k, v in env.items() if not k.startswith("DANAUS_")}
    ours: list[dict[str, Any]] = []
    theirs: list[dict[str, Any]] = []
    for round_ in range(args.rounds):
        log(f"round {round_ + 1}/{args.rounds}: danaus")
        ours.append(run_once(sys.executable, "danaus", env, args.steps))
        if peer is not None:
            log(f"round {round_ + 1}/{args.rounds}: monarch")
            theirs.append(run_once(str(peer), "monarch", peer_env, args.steps))
    rows = [summary("danaus", labels, ours)]
    if theirs:
        rows.append(summary("monarch", {}, theirs))
    for row in rows:
        print(json.dumps(row), flush=True)
    if len(rows) == 2:
        ratios = {"workload": "compute_mix", "danaus_over_monarch": True, **labels}
        for figure in FIGURES:
            a, b = rows[0].get(figure), rows[1].get(figure)
            if a is not None and b:
                ratios[f"{figure}_lower_is_better"] = round(a / b, 3)
        print(json.dumps(ratios), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
