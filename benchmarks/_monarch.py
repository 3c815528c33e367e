"""Running torchmonarch beside Danaus, for the benchmarks' ``--peer monarch``.

Monarch never shares a process or a virtualenv with Danaus: it lives in
``benchmarks/.monarch-venv`` (made on first use unless ``--no-install``), where
`_monarch_peer.py` runs the same workloads and prints them as JSON (the tensor
engine's in ``benchmarks/.monarch-tensor-venv``, with the torch Monarch was built
for). This module
makes that virtualenv, runs the peer, and merges its figures into Danaus's
report lines; it also runs the Danaus side (`run_danaus`). `messaging.py` and
`rdma.py` share it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _workloads import DIRECTION

import danaus

HERE = Path(__file__).resolve().parent
MONARCH_VERSION = "0.7.0"


@dataclass(frozen=True)
class MonarchEnv:
    """A virtualenv for torchmonarch, with the torch it runs there."""

    venv: Path
    torch: str

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def setup(self) -> str:
        """The commands that make it, for an error message."""
        return (
            f"python3 -m venv {self.venv} && "
            f"{self.venv}/bin/pip install torch=={self.torch} numpy && "
            f"{self.venv}/bin/pip install torchmonarch=={MONARCH_VERSION}"
        )


ACTORS = MonarchEnv(HERE / ".monarch-venv", "2.13.0")
"""For the actor and RDMA workloads: the torch of Danaus's own environment."""
TENSORS = MonarchEnv(HERE / ".monarch-tensor-venv", "2.14.1")
"""For the tensor engine's: torch 2.14.1, the build torchmonarch 0.7.0 was made for (with
2.13 its tensor engine's gradient features refuse to load: "PyTorch version mismatch")."""


def log(message: str) -> None:
    """Progress on stderr, named after the benchmark, so stdout stays JSON only."""
    print(f"[{Path(sys.argv[0]).stem}] {message}", file=sys.stderr, flush=True)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The command-line options of ``--peer monarch``."""
    parser.add_argument("--peer", choices=["monarch"], help="also run the workloads on Monarch")
    parser.add_argument(
        "--monarch-python",
        help="a python that has torchmonarch (default: that of benchmarks/.monarch-venv, or "
        ".monarch-tensor-venv for the tensor engine)",
    )
    parser.add_argument(
        "--monarch-transport",
        help="Monarch channel transport passed to enable_transport() (default: Monarch's own)",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="run Danaus and the peer this many times each, alternating; report medians "
        "and each run's figure (default 1)",
    )
    parser.add_argument(
        "--no-install",
        action="store_true",
        help="do not create the Monarch virtualenv when it is missing; report an error instead",
    )


def run_danaus(
    labels: dict[str, Any],
    names: list[str],
    workloads: Callable[[], Iterator[dict[str, Any]]],
    emit: Callable[[dict[str, Any]], None],
) -> list[dict[str, Any]]:
    """Run ``workloads()`` on Danaus configured as ``labels`` say; ``emit`` each result.

    ``labels`` are the transport and its options (``encrypt``). A transport that
    cannot be configured gives each workload of ``names`` that error.
    """
    transport = labels["transport"]
    options = {key: value for key, value in labels.items() if key != "transport"}
    results = []
    try:
        danaus.configure(transport=transport, **options)
    except Exception as exc:
        error = f"transport {transport!r} is not available: {type(exc).__name__}: {exc}"
        results = [{"workload": name, "error": error} for name in names]
        for result in results:
            emit(result)
        return results
    try:
        for result in workloads():
            results.append(result)
            emit(result)
    finally:
        danaus.shutdown()
    return results


# ---- the virtualenv ------------------------------------------------------------------


def _python_ok(python: Path) -> bool:
    if not python.exists():
        return False
    probe = subprocess.run(
        [str(python), "-c", "import monarch.actor, torch"],
        capture_output=True,
        timeout=120,
        env=_peer_env(),
    )
    return probe.returncode == 0


def _install_monarch(env: MonarchEnv) -> str | None:
    """Make ``env``'s virtualenv with torchmonarch; return an error or None."""
    pip = env.venv / "bin" / "pip"
    steps = [
        [sys.executable, "-m", "venv", str(env.venv)],
        [str(pip), "install", f"torch=={env.torch}", "numpy"],
        [str(pip), "install", f"torchmonarch=={MONARCH_VERSION}"],
    ]
    if env.python.exists():
        steps = steps[1:]
    log(f"installing torchmonarch {MONARCH_VERSION} into {env.venv} (once)")
    for step in steps:
        done = subprocess.run(step, capture_output=True, text=True, env=_peer_env())
        if done.returncode != 0:
            tail = (done.stdout + done.stderr).strip().splitlines()[-5:]
            return f"`{' '.join(step)}` failed: {' | '.join(tail)}"
    return None


def _peer_env() -> dict[str, str]:
    """The environment for the peer: nothing of this venv or of Danaus's settings."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME") and not k.startswith("DANAUS_")
    }
    env["PYTHONUNBUFFERED"] = "1"
    return env


def monarch_python(
    explicit: str | None, install: bool, env: MonarchEnv = ACTORS
) -> tuple[Path | None, str | None]:
    """The interpreter of the Monarch virtualenv, or why there is none."""
    if explicit:
        python = Path(explicit)
        if _python_ok(python):
            return python, None
        return None, f"{python} cannot import monarch.actor and torch"
    if _python_ok(env.python):
        return env.python, None
    if not install:
        return None, f"torchmonarch is not installed; install it with: {env.setup}"
    error = _install_monarch(env)
    if error is None and _python_ok(env.python):
        return env.python, None
    return None, (
        f"could not install torchmonarch {MONARCH_VERSION}: "
        f"{error or 'monarch.actor does not import'}; try by hand: {env.setup}"
    )


# ---- the peer process ----------------------------------------------------------------


@dataclass(frozen=True)
class Peer:
    """What the Monarch peer reported: results by workload, what it ran on, or why not."""

    results: dict[str, dict[str, Any]]
    info: dict[str, Any]
    error: str | None


def run_peer(args: argparse.Namespace, suite: str | None = None, env: MonarchEnv = ACTORS) -> Peer:
    """Run ``suite`` of `_monarch_peer.py` (the messaging workloads when None) on Monarch, in
    ``env``'s virtualenv.

    ``args`` are the benchmark's parsed options: ``quick`` and those of `add_arguments`.
    """
    python, error = monarch_python(args.monarch_python, install=not args.no_install, env=env)
    if python is None:
        return Peer({}, {}, error)
    command = [str(python), str(HERE / "_monarch_peer.py")]
    if suite:
        command += ["--suite", suite]
    if args.quick:
        command.append("--quick")
    if args.monarch_transport:
        command += ["--transport", args.monarch_transport]
    log(f"running the Monarch peer: {' '.join(command)}")
    try:
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=300 if args.quick else 1800,
            env=_peer_env(),
            cwd=HERE,
        )
    except subprocess.TimeoutExpired:
        return Peer({}, {}, "the Monarch peer timed out")
    results: dict[str, dict[str, Any]] = {}
    info: dict[str, Any] = {}
    for output in done.stdout.splitlines():
        try:
            row = json.loads(output)
        except ValueError:
            continue
        if not isinstance(row, dict):
            continue
        if "workload" in row:
            results[row["workload"]] = row
        elif "info" in row:
            info = row["info"]
        elif "error" in row:
            return Peer({}, info, str(row["error"]))
    if not results:
        tail = " | ".join(done.stderr.strip().splitlines()[-5:])
        error = f"the Monarch peer exited with {done.returncode} and no results: {tail}"
        return Peer({}, info, error)
    return Peer(results, info, None)


# ---- several rounds --------------------------------------------------------------------


def median_of_runs(runs: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One result per workload from several runs of it: each metric's median, and each run's
    figure in ``<metric>_runs``; a workload that failed in every run keeps its error."""
    merged: dict[str, list[dict[str, Any]]] = {}
    for run in runs:
        for result in run:
            merged.setdefault(result["workload"], []).append(result)
    results = []
    for tries in merged.values():
        good = [t for t in tries if "metrics" in t]
        if not good:
            results.append(tries[0])
            continue
        metrics: dict[str, Any] = {}
        for key, value in good[0]["metrics"].items():
            values = [t["metrics"][key] for t in good if key in t["metrics"]]
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                metrics[key] = round(statistics.median(values), 3)
                if len(values) > 1:
                    metrics[f"{key}_runs"] = values
            else:
                metrics[key] = value
        results.append({**good[0], "metrics": metrics})
    return results


def median_peer(peers: list[Peer]) -> Peer:
    """The peer's runs as one `Peer` of medians (the first error if none ran)."""
    good = [p for p in peers if p.error is None]
    if not good:
        return peers[0]
    runs = [list(p.results.values()) for p in good]
    return Peer({r["workload"]: r for r in median_of_runs(runs)}, good[0].info, None)


# ---- the report ----------------------------------------------------------------------


def line(labels: dict[str, Any], ours: dict[str, Any], peer: Peer | None = None) -> dict[str, Any]:
    """One report line: the workload, ``labels`` (its transport...), Danaus's figures and,
    with a peer, Monarch's and the ratios Danaus / Monarch."""
    theirs = peer.results.get(ours["workload"]) if peer is not None else None
    row: dict[str, Any] = {"workload": ours["workload"], **labels}
    row.update(ours.get("params") or (theirs or {}).get("params") or {})
    if "error" in ours:
        row["danaus_error"] = ours["error"]
    for key, value in ours.get("metrics", {}).items():
        row[f"danaus_{key}"] = value
    if peer is None:
        return row
    row["peer"] = "monarch"
    if peer.error is not None or theirs is None:
        row["monarch_error"] = peer.error or "no result"
    else:
        if "error" in theirs:
            row["monarch_error"] = theirs["error"]
        metrics = theirs.get("metrics", {})
        for key, value in metrics.items():
            row[f"monarch_{key}"] = value
        for key, better in DIRECTION.items():
            a, b = ours.get("metrics", {}).get(key), metrics.get(key)
            if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b:
                row[f"danaus_over_monarch_{key}_{better}_is_better"] = round(a / b, 3)
    for key, value in peer.info.items():
        row[f"monarch_{key}"] = value
    return row


def print_line(row: dict[str, Any]) -> None:
    print(json.dumps(row), flush=True)


def print_report(rows: list[tuple[dict[str, Any], dict[str, Any]]], peer: Peer) -> None:
    """Print Danaus's results, as ``(labels, result)`` pairs, merged with the peer's."""
    if peer.error is not None:
        print_line({"workload": "monarch_peer", "peer": "monarch", "error": peer.error})
    for labels, result in rows:
        print_line(line(labels, result, peer))
