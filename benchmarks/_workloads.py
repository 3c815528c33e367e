"""The messaging workloads, written once for any framework with Monarch's actor API.

`messaging.py` runs them on Danaus and `_monarch_peer.py` runs them on
torchmonarch, each in its own process and virtualenv. This module imports
neither framework: the caller hands it a `Framework` that knows how to spawn
procs and a benchmark actor, and it returns plain numbers.

The actor it expects has two endpoints: ``echo(x)`` returns ``x``, and
``length(payload)`` returns the payload's length in bytes.
"""

from __future__ import annotations

import compileall
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

MIB = 1024 * 1024
PROCS = 4
SETUP_TIMEOUT = 120.0
"""Seconds a mesh may take to answer its first call before the workload is reported failed."""

# Which way each headline metric is better; the report's ratios are named after it.
DIRECTION = {
    "ops_per_s": "higher",
    "cpu_us_per_op": "lower",
    "median_us": "lower",
    "p99_us": "lower",
    "calls_per_s": "higher",
    "mb_per_s": "higher",
    "median_s": "lower",
    "owner_cpu_ms": "lower",
    "first_mesh_s": "lower",
    "wall_s": "lower",
    "cpu_s": "lower",
}


@dataclass(frozen=True)
class Counts:
    """How much work each workload does."""

    rtt_warmup: int
    rtt_calls: int
    pipelined_warmup: int
    pipelined_calls: int
    broadcast_warmup: int
    broadcast_calls: int
    payload_warmup: int
    payload_calls: dict[int, int]
    mesh_up_runs: int
    program_runs: int


FULL = Counts(
    rtt_warmup=200,
    rtt_calls=2000,
    pipelined_warmup=1000,
    pipelined_calls=10_000,
    broadcast_warmup=50,
    broadcast_calls=1000,
    payload_warmup=2,
    payload_calls={MIB: 50, 64 * MIB: 10},
    mesh_up_runs=5,
    program_runs=3,
)

QUICK = Counts(
    rtt_warmup=20,
    rtt_calls=200,
    pipelined_warmup=50,
    pipelined_calls=500,
    broadcast_warmup=2,
    broadcast_calls=10,
    payload_warmup=1,
    payload_calls={MIB: 2, 64 * MIB: 1},
    mesh_up_runs=2,
    program_runs=1,
)


class Framework(Protocol):
    """What the workloads need from an actor framework."""

    def spawn_procs(self, count: int) -> Any:
        """A fresh proc mesh of ``count`` procs on this host, dimension ``gpus``."""

    def spawn(self, procs: Any) -> Any:
        """The benchmark actor spawned on every proc of ``procs``."""

    def stop(self, procs: Any) -> None:
        """Stop ``procs`` and wait until they are gone."""

    def tensor(self, nbytes: int) -> Any:
        """A float32 CPU tensor of ``nbytes`` bytes."""


def bench_actor(api: Any) -> type:
    """The actor every workload talks to, on ``api`` (``danaus`` or ``monarch.actor``).

    One class body for both frameworks; both pickle it by value (cloudpickle).
    """

    class Bench(api.Actor):
        @api.endpoint
        def echo(self, x: Any) -> Any:
            return x

        @api.endpoint
        def length(self, payload: Any) -> int:
            nbytes = getattr(payload, "nbytes", None)
            return len(payload) if nbytes is None else nbytes

    return Bench


class MeshFramework:
    """`Framework` over an API with Monarch's ``this_host`` and meshes.

    ``setup``: the source lines that make the API ``api`` in a program of its own
    and configure it as this process is (default: ``import <api> as api``).
    """

    def __init__(self, api: Any, setup: str | None = None) -> None:
        self._api = api
        self._bench = bench_actor(api)
        self.setup = setup if setup is not None else f"import {api.__name__} as api"
        self.package_file = sys.modules[api.__name__.partition(".")[0]].__file__ or ""
        """The ``__init__`` of the API's top package."""

    def spawn_procs(self, count: int) -> Any:
        return self._api.this_host().spawn_procs(per_host={"gpus": count})

    def spawn(self, procs: Any) -> Any:
        return procs.spawn("bench", self._bench)

    def stop(self, procs: Any) -> None:
        procs.stop().get()

    def tensor(self, nbytes: int) -> Any:
        import torch

        return torch.rand(nbytes // 4, dtype=torch.float32)


def _us(seconds: float) -> float:
    return round(seconds * 1e6, 1)


def _p99(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]


def timed(call: Callable[[int], Any], warmup: int, repeats: int) -> list[float]:
    """Seconds of each of ``repeats`` calls ``call(i)``, after ``warmup`` untimed ones.

    ``call`` waits for its answer; ``i`` counts from 0 in the warm-up and again in the timed run.
    """
    for i in range(warmup):
        call(i)
    samples = []
    clock = time.perf_counter
    for i in range(repeats):
        start = clock()
        call(i)
        samples.append(clock() - start)
    return samples


def call_one_rtt(one: Any, counts: Counts) -> dict[str, Any]:
    """Sequential ``call_one`` round trips of a small argument."""
    samples = timed(lambda i: one.echo.call_one(i).get(), counts.rtt_warmup, counts.rtt_calls)
    return {
        "params": {"calls": counts.rtt_calls},
        "metrics": {
            "median_us": _us(statistics.median(samples)),
            "p99_us": _us(_p99(samples)),
            "mean_us": _us(statistics.fmean(samples)),
        },
    }


def _pipeline(one: Any, calls: int) -> tuple[float, float]:
    clock = time.perf_counter
    start = clock()
    futures = [one.echo.call_one(i) for i in range(calls)]
    issued = clock()
    for i, future in enumerate(futures):
        if future.get() != i:
            raise AssertionError(f"call {i} answered out of turn")
    return issued - start, clock() - start


def pipelined(one: Any, counts: Counts) -> dict[str, Any]:
    """Issue many ``call_one`` calls without waiting, then wait for all of them."""
    _pipeline(one, counts.pipelined_warmup)
    issue, total = _pipeline(one, counts.pipelined_calls)
    return {
        "params": {"calls": counts.pipelined_calls},
        "metrics": {
            "calls_per_s": round(counts.pipelined_calls / total),
            "issue_calls_per_s": round(counts.pipelined_calls / issue),
        },
    }


def broadcast_gather(mesh: Any, counts: Counts) -> dict[str, Any]:
    """``mesh.echo.call(x).get()`` in a loop: one message to every proc, every answer back."""
    samples = timed(
        lambda i: mesh.echo.call(i).get(), counts.broadcast_warmup, counts.broadcast_calls
    )
    return {
        "params": {"calls": counts.broadcast_calls, "procs": PROCS},
        "metrics": {
            "calls_per_s": round(len(samples) / sum(samples)),
            "median_us": _us(statistics.median(samples)),
        },
    }


def payload(
    one: Any, kind: str, make: Callable[[int], Any], nbytes: int, calls: int, warmup: int
) -> dict[str, Any]:
    """Round trips of ``call_one`` with a large argument; the answer is only its size."""
    value = make(nbytes)

    def call(_: int) -> None:
        answer = one.length.call_one(value).get()
        if answer != nbytes:
            raise AssertionError(f"the actor received {answer} bytes, not {nbytes}")

    samples = timed(call, warmup, calls)
    median = statistics.median(samples)
    return {
        "params": {"kind": kind, "bytes": nbytes, "calls": calls},
        "metrics": {
            "mb_per_s": round(nbytes / median / 1e6, 1),
            "median_ms": round(median * 1e3, 3),
        },
    }


def mesh_up(fw: Framework, counts: Counts) -> dict[str, Any]:
    """Seconds from ``spawn_procs`` until a 4-proc actor mesh has answered a first call."""
    times = []
    clock = time.perf_counter
    for _ in range(counts.mesh_up_runs):
        start = clock()
        procs = fw.spawn_procs(PROCS)
        mesh = fw.spawn(procs)
        mesh.echo.call(0).get(timeout=SETUP_TIMEOUT)
        times.append(clock() - start)
        fw.stop(procs)
    return {
        "params": {"runs": len(times), "procs": PROCS},
        "metrics": {
            "median_s": round(statistics.median(times), 3),
            "min_s": round(min(times), 3),
            "first_s": round(times[0], 3),
        },
    }


PROGRAM = """
import json
import time

{setup}


class Hello(api.Actor):
    @api.endpoint
    def echo(self, x):
        return x


if __name__ == "__main__":
    start = time.perf_counter()
    procs = api.this_host().spawn_procs(per_host={{"gpus": {procs}}})
    procs.spawn("hello", Hello).echo.call(1).get(timeout={timeout})
    print(json.dumps({{"first_mesh_s": time.perf_counter() - start}}), flush=True)
"""
"""A whole program: it spawns procs, makes one call to each, and exits."""

RUNNER = """
import ctypes, json, os, resource, subprocess, sys, time
# Orphaned descendants of the program come back to this process, which reaps them,
# so that the CPU time below counts every process the program started.
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
start = time.perf_counter()
done = subprocess.run([sys.executable, sys.argv[1]], capture_output=True, text=True,
                      timeout=float(sys.argv[2]))
wall = time.perf_counter() - start
deadline = time.monotonic() + 30
while time.monotonic() < deadline:
    try:
        if os.waitpid(-1, os.WNOHANG) == (0, 0):
            time.sleep(0.05)
    except ChildProcessError:
        break
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"returncode": done.returncode, "stdout": done.stdout,
                  "stderr": done.stderr[-2000:], "wall_s": wall,
                  "cpu_s": usage.ru_utime + usage.ru_stime}))
"""
"""Runs `PROGRAM` from a file and reports its wall time to exit and the CPU time of the
program and every process it started."""


def program(fw: MeshFramework, procs: int, runs: int) -> dict[str, Any]:
    """`PROGRAM` with ``procs`` procs, ``runs`` times, each a fresh interpreter: its first mesh
    (from ``spawn_procs`` until every proc has answered), its wall time from start to exit,
    and the CPU time of it and every process it started."""
    source = PROGRAM.format(setup=fw.setup, procs=procs, timeout=SETUP_TIMEOUT)
    # As an installed package has, whatever PYTHONDONTWRITEBYTECODE says: otherwise an
    # editable checkout compiles every module it imports, at every start.
    compileall.compile_dir(os.path.dirname(fw.package_file), quiet=1)
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "hello.py")
        with open(path, "w") as file:
            file.write(source)
        results = [_run_program(path) for _ in range(runs)]
    return {
        "params": {"procs": procs, "runs": runs},
        "metrics": {
            name: round(statistics.median(result[name] for result in results), 3)
            for name in ("first_mesh_s", "wall_s", "cpu_s")
        },
    }


def _run_program(path: str) -> dict[str, float]:
    runner = subprocess.run(
        [sys.executable, "-c", RUNNER, path, str(SETUP_TIMEOUT)],
        capture_output=True,
        text=True,
        timeout=2 * SETUP_TIMEOUT,
    )
    if runner.returncode != 0:
        raise RuntimeError(f"the program's runner failed: {runner.stderr[-2000:]}")
    result = json.loads(runner.stdout)
    if result["returncode"] != 0:
        raise RuntimeError(f"the program failed: {result['stderr']}")
    first_mesh = json.loads(result["stdout"].strip().splitlines()[-1])["first_mesh_s"]
    return {"first_mesh_s": first_mesh, "wall_s": result["wall_s"], "cpu_s": result["cpu_s"]}


def size_name(nbytes: int) -> str:
    return f"{nbytes // MIB}MiB"


def workload_names(counts: Counts) -> list[str]:
    """Every workload, in the order `run_all` runs them."""
    names = ["call_one_rtt", "pipelined_call_one", "broadcast_gather_4"]
    for kind in ("bytes", "tensor"):
        names += [f"payload_{kind}_{size_name(n)}" for n in counts.payload_calls]
    return [*names, "mesh_up_4", "first_mesh_4", "hello_world_2"]


def run_all(fw: MeshFramework, counts: Counts) -> Iterator[dict[str, Any]]:
    """Run every workload; yield ``{"workload", "params", "metrics"}`` or ``{"workload", "error"}``.

    A workload that fails yields its error and the rest still run.
    """
    steps: list[tuple[str, Callable[[Any, Any], dict[str, Any]]]] = [
        ("call_one_rtt", lambda mesh, one: call_one_rtt(one, counts)),
        ("pipelined_call_one", lambda mesh, one: pipelined(one, counts)),
        ("broadcast_gather_4", lambda mesh, one: broadcast_gather(mesh, counts)),
    ]
    makers: dict[str, Callable[[int], Any]] = {"bytes": os.urandom, "tensor": fw.tensor}
    for kind, maker in makers.items():
        for nbytes, calls in counts.payload_calls.items():
            steps.append(
                (
                    f"payload_{kind}_{size_name(nbytes)}",
                    lambda mesh, one, k=kind, m=maker, n=nbytes, c=calls: payload(
                        one, k, m, n, c, counts.payload_warmup
                    ),
                )
            )
    procs = None
    try:
        procs = fw.spawn_procs(PROCS)
        mesh = fw.spawn(procs)
        mesh.echo.call(0).get(timeout=SETUP_TIMEOUT)
        one = mesh.slice(gpus=0)
    except Exception as exc:
        for name, _ in steps:
            yield {"workload": name, "error": f"setting up the mesh failed: {describe(exc)}"}
        steps = []
    for name, step in steps:
        try:
            yield {"workload": name, **step(mesh, one)}
        except Exception as exc:
            yield {"workload": name, "error": describe(exc)}
    if procs is not None:
        try:
            fw.stop(procs)
        except Exception as exc:
            yield {"workload": "stop", "error": describe(exc)}
    try:
        yield {"workload": "mesh_up_4", **mesh_up(fw, counts)}
    except Exception as exc:
        yield {"workload": "mesh_up_4", "error": describe(exc)}
    for name, procs in (("first_mesh_4", PROCS), ("hello_world_2", 2)):
        try:
            yield {"workload": name, **program(fw, procs, counts.program_runs)}
        except Exception as exc:
            yield {"workload": name, "error": describe(exc)}


def describe(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= 500 else text[:497] + "..."
