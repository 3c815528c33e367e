"""The tensor engine's workloads, written once for Danaus and for torchmonarch.

`tensor_engine.py` runs them on Danaus and `_monarch_peer.py --suite tensor` on
Monarch, each in its own process and virtualenv. This module imports neither
framework: the caller hands it a `TensorFramework` with the framework's
``inspect`` and ``this_host``, and it returns plain numbers.

* ``dependent_adds``: on a mesh of 2 procs, 1,000 dependent ``t = t + 1`` on a
  16-element tensor, then one ``inspect`` of ``t``; the best of three such
  batches: operations per second, and the controller's CPU per operation (every
  thread of its process, from ``time.process_time``).
* ``inspect_small``: the latency of ``inspect`` of a 16-element tensor.
* ``to_mesh_64MiB``: a 64 MiB float32 tensor moved from one proc's slice of a
  2-proc mesh to the other's, timed up to the ``inspect`` of one element of it.
* ``reduce_64MiB_4procs``: an in-place sum (``reduce_``) of a 64 MiB float32
  tensor over a mesh of 4 procs, timed up to the ``inspect`` of one element;
  ``tensor_engine.py`` also times raw gloo ``all_reduce`` called the same way
  (`raw_gloo_allreduce`) without any framework.
"""

from __future__ import annotations

import datetime
import multiprocessing
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

MIB = 1024 * 1024
WAIT = 300.0
"""Seconds an ``inspect`` may take before the workload is reported failed (Monarch's reduce
hangs the next fetch on CPU)."""


@dataclass(frozen=True)
class Plan:
    """How much work each workload does."""

    ops: int
    batches: int
    inspects: int
    transfer_bytes: int
    transfers: int
    reduce_bytes: int
    reductions: int


FULL = Plan(
    ops=1000,
    batches=3,
    inspects=300,
    transfer_bytes=64 * MIB,
    transfers=5,
    reduce_bytes=64 * MIB,
    reductions=5,
)
QUICK = Plan(
    ops=200,
    batches=2,
    inspects=30,
    transfer_bytes=4 * MIB,
    transfers=2,
    reduce_bytes=4 * MIB,
    reductions=2,
)

NAMES = ["dependent_adds", "inspect_small", "reduce_64MiB_4procs", "to_mesh_64MiB"]


@dataclass(frozen=True)
class TensorFramework:
    """What the workloads need of a framework: spawning procs on this host, and fetching."""

    this_host: Callable[[], Any]
    fetch_shard: Callable[..., Any]

    def inspect(self, value: Any, **coords: int) -> Any:
        return self.fetch_shard(value, coords or None).get(timeout=WAIT)


def run_all(framework: TensorFramework, plan: Plan) -> Iterator[dict[str, Any]]:
    """Each workload's result: its metrics, or the error that stopped it."""
    two = framework.this_host().spawn_procs(per_host={"gpu": 2})
    four = framework.this_host().spawn_procs(per_host={"gpu": 4})
    for name, workload in (
        ("dependent_adds", lambda: dependent_adds(framework, two, plan)),
        ("inspect_small", lambda: inspect_small(framework, two, plan)),
        ("reduce_64MiB_4procs", lambda: reduce(framework, four, plan)),
        ("to_mesh_64MiB", lambda: to_mesh(framework, two, plan)),
    ):
        try:
            yield {"workload": name, "metrics": workload()}
        except Exception as exc:  # one workload failing leaves the others to run
            yield {"workload": name, "error": f"{type(exc).__name__}: {exc}"[:500]}


def dependent_adds(framework: TensorFramework, mesh: Any, plan: Plan) -> dict[str, Any]:
    with mesh.activate():
        t = torch.zeros(16)
        framework.inspect(t)
        best, best_cpu = float("inf"), 0.0
        for _ in range(plan.batches):
            cpu, started = time.process_time(), time.perf_counter()
            for _ in range(plan.ops):
                t = t + 1
            framework.inspect(t)
            elapsed = time.perf_counter() - started
            if elapsed < best:
                best, best_cpu = elapsed, time.process_time() - cpu
    last = float(framework.inspect(t)[0])
    if last != plan.ops * plan.batches:
        raise AssertionError(f"t is {last} after {plan.ops * plan.batches} additions")
    return {
        "ops_per_s": round(plan.ops / best, 1),
        "cpu_us_per_op": round(best_cpu / plan.ops * 1e6, 2),
        "median_s": round(best, 4),
    }


def inspect_small(framework: TensorFramework, mesh: Any, plan: Plan) -> dict[str, Any]:
    with mesh.activate():
        t = torch.arange(16.0)
        for _ in range(10):
            framework.inspect(t)
        times = []
        for _ in range(plan.inspects):
            started = time.perf_counter()
            framework.inspect(t)
            times.append(time.perf_counter() - started)
    times.sort()
    return {
        "median_us": round(statistics.median(times) * 1e6, 1),
        "p99_us": round(times[int(len(times) * 0.99) - 1] * 1e6, 1),
    }


def to_mesh(framework: TensorFramework, mesh: Any, plan: Plan) -> dict[str, Any]:
    source, dest = mesh.slice(gpu=slice(0, 1)), mesh.slice(gpu=slice(1, 2))
    elements = plan.transfer_bytes // 4
    with source.activate():
        x = torch.arange(elements, dtype=torch.float32)
        framework.inspect(x[:1])
    times = []
    for attempt in range(plan.transfers + 1):
        started = time.perf_counter()
        y = x.to_mesh(dest)
        last = float(framework.inspect(y[-1:])[0])
        if attempt:  # the first moves the tensor once untimed
            times.append(time.perf_counter() - started)
        if last != elements - 1:
            raise AssertionError(f"the moved tensor ends with {last}, not {elements - 1}")
        del y
    median = statistics.median(times)
    return {"median_s": round(median, 4), "mb_per_s": round(plan.transfer_bytes / median / 1e6, 1)}


def reduce(framework: TensorFramework, mesh: Any, plan: Plan) -> dict[str, Any]:
    elements = plan.reduce_bytes // 4
    with mesh.activate():
        x = torch.zeros(elements)
        x.reduce_("gpu", "sum")  # the process groups are made once, untimed
        framework.inspect(x[:1])
        times = []
        for _ in range(plan.reductions):
            started = time.perf_counter()
            x.reduce_("gpu", "sum")
            framework.inspect(x[:1])
            times.append(time.perf_counter() - started)
    median = statistics.median(times)
    return {"median_s": round(median, 4), "mb_per_s": round(plan.reduce_bytes / median / 1e6, 1)}


def raw_gloo_allreduce(plan: Plan, procs: int = 4) -> dict[str, Any]:
    """gloo's ``all_reduce`` of the same tensor in place over ``procs`` processes on loopback,
    timed on rank 0 (each reduction followed by a barrier, as the engine's by a fetch)."""
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    with tempfile.TemporaryDirectory() as folder:
        rendezvous = os.path.join(folder, "store")
        workers = [
            context.Process(target=_gloo_rank, args=(rank, procs, rendezvous, plan, results))
            for rank in range(procs)
        ]
        for worker in workers:
            worker.start()
        times = results.get(timeout=WAIT)
        for worker in workers:
            worker.join(WAIT)
    median = statistics.median(times)
    return {"median_s": round(median, 4), "mb_per_s": round(plan.reduce_bytes / median / 1e6, 1)}


def _gloo_rank(rank: int, procs: int, path: str, plan: Plan, results: Any) -> None:
    import torch.distributed as dist

    options = dist.ProcessGroupGloo._Options()
    options._devices = [dist.ProcessGroupGloo.create_device(hostname="127.0.0.1")]
    options._timeout = datetime.timedelta(seconds=WAIT)
    group = dist.ProcessGroupGloo(dist.FileStore(path, procs), rank, procs, options)
    x = torch.zeros(plan.reduce_bytes // 4)
    group.allreduce([x]).wait()
    times = []
    for _ in range(plan.reductions):
        started = time.perf_counter()
        group.allreduce([x]).wait()
        group.barrier().wait()
        times.append(time.perf_counter() - started)
    if rank == 0:
        results.put(times)


def streams_overlap(
    framework: TensorFramework,
    stream: Callable[[str], Any],
    one_thread: Callable[[], None],
    plan: Plan,
) -> dict:
    """A compute stream and a transfer stream of the same procs, alone and together.

    Matrix products run on the default stream of a proc while, on a ``transfer``
    stream, a small tensor goes back and forth between it and another proc (each
    move waits for the one before: work bound by latency, not by a CPU, since a
    small shared machine has none to spare). ``overlap`` is the time saved by
    running both at once over the shorter of the two: 1 when the shorter hides
    entirely behind the longer, 0 when they queue. ``one_thread`` is a remote
    function that limits torch to one thread on each proc.
    """
    mesh = framework.this_host().spawn_procs(per_host={"gpu": 2})
    here, there = mesh.slice(gpu=slice(0, 1)), mesh.slice(gpu=slice(1, 2))
    transfer = stream("transfer")
    with mesh.activate():
        one_thread()  # a core for the products, the other for the moves
    with here.activate():
        a = torch.rand(768, 768)
        with transfer.activate():
            x = torch.ones(1024)
        framework.inspect(a[:1])

    def compute() -> Any:
        with here.activate():
            y = a
            for _ in range(3):
                y = (y @ a) / 768
            return y[:1, :1]

    def move() -> Any:
        moved = x
        for hop in range(40):
            moved = moved.to_mesh(there if hop % 2 == 0 else here, stream=transfer)
        with transfer.activate():
            return moved[:1]

    def wait_moved(moved: Any) -> None:
        with transfer.activate():
            framework.inspect(moved)

    def both() -> None:
        moved = move()
        framework.inspect(compute())
        wait_moved(moved)

    framework.inspect(compute())  # warm up (torch's threads, the caches of shapes)
    wait_moved(move())
    times: dict[str, list[float]] = {"compute": [], "transfer": [], "both": []}
    for _ in range(3 * plan.transfers):  # interleaved, so that the machine's mood hits all three
        for name, work in (
            ("compute", lambda: framework.inspect(compute())),
            ("transfer", lambda: wait_moved(move())),
            ("both", both),
        ):
            started = time.perf_counter()
            work()
            times[name].append(time.perf_counter() - started)
    computing, moving, together = (statistics.median(times[n]) for n in times)
    overlap = (computing + moving - together) / min(computing, moving)
    return {
        "compute_s": round(computing, 4),
        "transfer_s": round(moving, 4),
        "both_s": round(together, 4),
        "overlap": round(overlap, 2),
    }
