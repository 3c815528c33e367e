"""Messaging benchmarks: round trips, pipelining, broadcast, payloads and start-up.

Prints one JSON line per workload (see docs/performance.md for what each one
measures). Nothing here asserts on speed.

    python benchmarks/messaging.py                   # Danaus over tcp
    python benchmarks/messaging.py --transport sim   # any transport Danaus knows
    python benchmarks/messaging.py --quick           # small counts, a smoke test
    python benchmarks/messaging.py --peer monarch    # also run torchmonarch, side by side

With ``--peer monarch`` the same workloads run on torchmonarch, in a separate
process of a separate virtualenv (``benchmarks/.monarch-venv``, made on first
use unless ``--no-install``), after the Danaus run has finished. Each line then
also carries Monarch's figures (``monarch_*``) and the ratios Danaus/Monarch
(``danaus_over_monarch_<metric>_<lower|higher>_is_better``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _workloads import DIRECTION, FULL, QUICK, Counts, Framework, run_all, workload_names

import danaus
from danaus import Actor, endpoint, this_host

HERE = Path(__file__).resolve().parent
MONARCH_VENV = HERE / ".monarch-venv"
MONARCH_VERSION = "0.7.0"
TORCH_VERSION = "2.13.0"
MONARCH_SETUP = (
    f"python3 -m venv {MONARCH_VENV} && "
    f"{MONARCH_VENV}/bin/pip install torch=={TORCH_VERSION} numpy && "
    f"{MONARCH_VENV}/bin/pip install torchmonarch=={MONARCH_VERSION}"
)


class Bench(Actor):
    """The actor every workload talks to."""

    @endpoint
    def echo(self, x: Any) -> Any:
        return x

    @endpoint
    def length(self, payload: Any) -> int:
        nbytes = getattr(payload, "nbytes", None)
        return len(payload) if nbytes is None else nbytes


class Danaus(Framework):
    def spawn_procs(self, count: int) -> Any:
        return this_host().spawn_procs(per_host={"gpus": count})

    def spawn(self, procs: Any) -> Any:
        return procs.spawn("bench", Bench)

    def stop(self, procs: Any) -> None:
        procs.stop().get()

    def tensor(self, nbytes: int) -> Any:
        import torch

        return torch.rand(nbytes // 4, dtype=torch.float32)


def log(message: str) -> None:
    print(f"[messaging] {message}", file=sys.stderr, flush=True)


def run_danaus(transport: str, counts: Counts, emit: Any) -> list[dict[str, Any]]:
    """Run every workload on Danaus; ``emit`` each result as it comes."""
    results = []
    try:
        danaus.configure(transport=transport)
    except Exception as exc:
        error = f"transport {transport!r} is not available: {type(exc).__name__}: {exc}"
        results = [{"workload": name, "error": error} for name in workload_names(counts)]
        for result in results:
            emit(result)
        return results
    try:
        for result in run_all(Danaus(), counts):
            results.append(result)
            emit(result)
    finally:
        danaus.shutdown()
    return results


# ---- the Monarch peer -----------------------------------------------------------------


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


def _install_monarch() -> str | None:
    """Make ``benchmarks/.monarch-venv`` with torchmonarch; return an error or None."""
    python = MONARCH_VENV / "bin" / "python"
    pip = MONARCH_VENV / "bin" / "pip"
    steps = [
        [sys.executable, "-m", "venv", str(MONARCH_VENV)],
        [str(pip), "install", f"torch=={TORCH_VERSION}", "numpy"],
        [str(pip), "install", f"torchmonarch=={MONARCH_VERSION}"],
    ]
    if python.exists():
        steps = steps[1:]
    log(f"installing torchmonarch {MONARCH_VERSION} into {MONARCH_VENV} (once)")
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


def monarch_python(explicit: str | None, install: bool) -> tuple[Path | None, str | None]:
    """The interpreter of the Monarch virtualenv, or why there is none."""
    if explicit:
        python = Path(explicit)
        if _python_ok(python):
            return python, None
        return None, f"{python} cannot import monarch.actor and torch"
    python = MONARCH_VENV / "bin" / "python"
    if _python_ok(python):
        return python, None
    if not install:
        return None, f"torchmonarch is not installed; install it with: {MONARCH_SETUP}"
    error = _install_monarch()
    if error is None and _python_ok(python):
        return python, None
    return None, (
        f"could not install torchmonarch {MONARCH_VERSION}: "
        f"{error or 'monarch.actor does not import'}; try by hand: {MONARCH_SETUP}"
    )


def run_monarch(
    python: Path, quick: bool, transport: str | None
) -> tuple[dict[str, dict[str, Any]], str | None, dict[str, Any]]:
    """Run the workloads on Monarch in its own process; results by workload, or an error."""
    command = [str(python), str(HERE / "_monarch_peer.py")]
    if quick:
        command.append("--quick")
    if transport:
        command += ["--transport", transport]
    log(f"running the Monarch peer: {' '.join(command)}")
    try:
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=300 if quick else 1800,
            env=_peer_env(),
            cwd=HERE,
        )
    except subprocess.TimeoutExpired:
        return {}, "the Monarch peer timed out", {}
    results: dict[str, dict[str, Any]] = {}
    info: dict[str, Any] = {}
    for line in done.stdout.splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if not isinstance(row, dict):
            continue
        if "workload" in row:
            results[row["workload"]] = row
        elif "info" in row:
            info = row["info"]
        elif "error" in row:
            return {}, str(row["error"]), info
    if not results:
        tail = " | ".join(done.stderr.strip().splitlines()[-5:])
        return {}, f"the Monarch peer exited with {done.returncode} and no results: {tail}", info
    return results, None, info


# ---- the report -------------------------------------------------------------------------


def line(
    transport: str,
    ours: dict[str, Any],
    peer: dict[str, Any] | None = None,
    peer_error: str | None = None,
) -> dict[str, Any]:
    row: dict[str, Any] = {"workload": ours["workload"], "transport": transport}
    row.update(ours.get("params") or (peer or {}).get("params") or {})
    if "error" in ours:
        row["danaus_error"] = ours["error"]
    for key, value in ours.get("metrics", {}).items():
        row[f"danaus_{key}"] = value
    if peer is None and peer_error is None:
        return row
    row["peer"] = "monarch"
    if peer_error is not None or peer is None:
        row["monarch_error"] = peer_error or "no result"
        return row
    if "error" in peer:
        row["monarch_error"] = peer["error"]
    theirs = peer.get("metrics", {})
    for key, value in theirs.items():
        row[f"monarch_{key}"] = value
    for key, better in DIRECTION.items():
        a, b = ours.get("metrics", {}).get(key), theirs.get(key)
        if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b:
            row[f"danaus_over_monarch_{key}_{better}_is_better"] = round(a / b, 3)
    return row


def print_line(row: dict[str, Any]) -> None:
    print(json.dumps(row), flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--transport", default="tcp", help="Danaus transport: tcp (default), sim, ucx, ..."
    )
    parser.add_argument("--quick", action="store_true", help="small counts, for a smoke test")
    parser.add_argument("--peer", choices=["monarch"], help="also run the workloads on Monarch")
    parser.add_argument(
        "--monarch-python",
        help="a python that has torchmonarch (default: that of benchmarks/.monarch-venv)",
    )
    parser.add_argument(
        "--monarch-transport",
        help="Monarch channel transport passed to enable_transport() (default: Monarch's own)",
    )
    parser.add_argument(
        "--no-install",
        action="store_true",
        help="do not create benchmarks/.monarch-venv when it is missing; report an error instead",
    )
    args = parser.parse_args(argv)
    counts = QUICK if args.quick else FULL
    transport = args.transport

    if args.peer is None:
        run_danaus(transport, counts, lambda r: print_line(line(transport, r)))
        return 0

    started = time.perf_counter()
    ours = run_danaus(
        transport,
        counts,
        lambda r: log(f"danaus {r['workload']}: {r.get('metrics', r.get('error'))}"),
    )
    log(f"danaus done in {time.perf_counter() - started:.1f} s")
    python, error = monarch_python(args.monarch_python, install=not args.no_install)
    theirs: dict[str, dict[str, Any]] = {}
    info: dict[str, Any] = {}
    if python is not None:
        theirs, error, info = run_monarch(python, args.quick, args.monarch_transport)
    if error is not None:
        print_line({"workload": "monarch_peer", "peer": "monarch", "error": error})
    for result in ours:
        row = line(transport, result, theirs.get(result["workload"]), error)
        if info:
            row["monarch_version"] = info.get("version")
            row["monarch_transport"] = info.get("transport")
        print_line(row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
