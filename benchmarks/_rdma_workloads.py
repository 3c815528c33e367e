"""The RDMA workloads, written once for any framework with Monarch's RDMABuffer API.

`rdma.py` runs them on Danaus and `_monarch_peer.py --suite rdma` on
torchmonarch, each in its own process and virtualenv. Like `_workloads`, this
module imports neither framework: the caller hands it a `Framework` that spawns
the owner actor, and it returns plain numbers.

The owner lives on a worker proc, as a trainer's weights would. Its actor has
four endpoints: ``register(nbytes)`` fills ``nbytes`` of fresh memory with
random bytes, registers them and returns the RDMABuffer; ``checksum()`` returns
the CRC-32 of that memory as it is now; ``release()`` drops the buffer and
frees the memory; ``pid()`` returns its process id. The controller moves the
data, with ``read_into`` and ``write_from`` into and out of its own memory,
which works the same on both frameworks and leaves no message round trip
inside the timings.

The owner's CPU time during each timed transfer is read from outside, in
``/proc/<pid>/task/*/schedstat`` (nanoseconds on a CPU, summed over every
thread of the owner's process), so measuring it runs no code in the owner. It
is reported as ``owner_cpu_ms`` (median per transfer) and ``owner_cpu_pct``
(that, over the transfer's time): 0 when the owner takes no part, up to 100 per
core it keeps busy. It needs Linux and an owner in another process (not on sim).
"""

from __future__ import annotations

import os
import statistics
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from _workloads import MIB, SETUP_TIMEOUT, describe, size_name

OPERATIONS = ("read_into", "write_from")


@dataclass(frozen=True)
class Plan:
    """The sizes to move, and how many timed transfers of each after ``warmup`` untimed."""

    warmup: int
    repeats: dict[int, int]


FULL = Plan(warmup=1, repeats={MIB: 20, 64 * MIB: 5, 256 * MIB: 3})
QUICK = Plan(warmup=1, repeats={MIB: 2, 16 * MIB: 2})
"""Two sizes: less than one chunk of Danaus's tcp fallback (8 MiB), and two chunks."""


class Framework(Protocol):
    """What the workloads need from an actor framework."""

    def spawn_owner(self) -> tuple[Any, Any]:
        """A mesh of one fresh proc on this host, and the owner actor spawned on it."""

    def stop(self, procs: Any) -> None:
        """Stop ``procs`` and wait until they are gone."""


def owner_actor(api: Any, rdma_buffer: type) -> type:
    """The owner actor on ``api`` (``danaus`` or ``monarch.actor``) and its ``RDMABuffer``.

    The memory is registered as a memoryview of a numpy array, which both take.
    """

    class Owner(api.Actor):
        def __init__(self) -> None:
            self.memory: np.ndarray | None = None
            self.buffer: Any = None

        @api.endpoint
        def register(self, nbytes: int) -> Any:
            self.memory = np.random.default_rng(0).integers(0, 256, nbytes, dtype=np.uint8)
            self.buffer = rdma_buffer(memoryview(self.memory))
            return self.buffer

        @api.endpoint
        def checksum(self) -> int:
            return zlib.crc32(self.memory)

        @api.endpoint
        def release(self) -> None:
            self.buffer.drop().get()
            self.buffer = self.memory = None

        @api.endpoint
        def pid(self) -> int:
            return os.getpid()

    return Owner


class OwnerFramework:
    """`Framework` over an API with Monarch's ``this_host`` and meshes."""

    def __init__(self, api: Any, rdma_buffer: type) -> None:
        self._api = api
        self._owner = owner_actor(api, rdma_buffer)

    def spawn_owner(self) -> tuple[Any, Any]:
        procs = self._api.this_host().spawn_procs(per_host={"procs": 1})
        return procs, procs.spawn("owner", self._owner)

    def stop(self, procs: Any) -> None:
        procs.stop().get()


def workload_names(plan: Plan) -> list[str]:
    """Every workload, in the order `run_all` runs them."""
    return [f"{op}_{size_name(n)}" for n in plan.repeats for op in OPERATIONS]


def cpu_seconds(pid: int) -> float:
    """CPU time so far of every thread of process ``pid``, from ``/proc`` (Linux)."""
    nanoseconds = 0
    tasks = f"/proc/{pid}/task"
    for task in os.listdir(tasks):
        try:
            with open(f"{tasks}/{task}/schedstat") as stat:
                nanoseconds += int(stat.read().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            continue  # a thread that ended meanwhile
    return nanoseconds / 1e9


def _verify(op: str, local: memoryview, owner: Any) -> None:
    """The owner's memory must now hold exactly the controller's bytes."""
    ours = zlib.crc32(local)
    theirs = owner.checksum.call_one().get(timeout=SETUP_TIMEOUT)
    if ours != theirs:
        raise AssertionError(
            f"{op} moved the wrong bytes: CRC-32 {ours:#010x} here, {theirs:#010x} at the owner"
        )


def transfer(
    op: str, owner: Any, buffer: Any, nbytes: int, warmup: int, repeats: int, pid: int | None
) -> dict[str, Any]:
    """Time ``buffer.read_into(dst)`` or ``buffer.write_from(src)``, then check the bytes once.

    The local memory is one memoryview made before the warm-up, so a framework
    that registers local memory on first use (Monarch caches it) pays for that
    outside the timings. With the owner's ``pid``, its CPU time is read around
    each timed transfer, outside the timing.
    """
    if op == "read_into":
        local = memoryview(np.empty(nbytes, dtype=np.uint8))
    else:
        local = memoryview(np.random.default_rng(1).integers(0, 256, nbytes, dtype=np.uint8))

    def move() -> None:
        if op == "read_into":
            buffer.read_into(local).get()
        else:
            buffer.write_from(local).get()

    for _ in range(warmup):
        move()
    samples, cpu = [], []
    for _ in range(repeats):
        before = cpu_seconds(pid) if pid is not None else 0.0
        start = time.perf_counter()
        move()
        samples.append(time.perf_counter() - start)
        if pid is not None:
            cpu.append(cpu_seconds(pid) - before)
    _verify(op, local, owner)
    median = statistics.median(samples)
    metrics = {"mb_per_s": round(nbytes / median / 1e6, 1), "median_s": round(median, 6)}
    if cpu:
        metrics["owner_cpu_ms"] = round(statistics.median(cpu) * 1e3, 3)
        metrics["owner_cpu_pct"] = round(
            statistics.median(c / s for c, s in zip(cpu, samples)) * 100, 1
        )
    return {"params": {"op": op, "bytes": nbytes, "repeats": len(samples)}, "metrics": metrics}


def _one_size(owner: Any, nbytes: int, plan: Plan, pid: int | None) -> Iterator[dict[str, Any]]:
    """Register ``nbytes`` at the owner, read them, write them, release them."""
    names = [f"{op}_{size_name(nbytes)}" for op in OPERATIONS]
    repeats = plan.repeats[nbytes]
    try:
        buffer = owner.register.call_one(nbytes).get(timeout=SETUP_TIMEOUT)
    except Exception as exc:
        for name in names:
            yield {"workload": name, "error": f"registering the buffer failed: {describe(exc)}"}
        return
    for op, name in zip(OPERATIONS, names):
        try:
            yield {
                "workload": name,
                **transfer(op, owner, buffer, nbytes, plan.warmup, repeats, pid),
            }
        except Exception as exc:
            yield {"workload": name, "error": describe(exc)}
    try:
        owner.release.call_one().get(timeout=SETUP_TIMEOUT)
    except Exception as exc:
        yield {"workload": f"release_{size_name(nbytes)}", "error": describe(exc)}


def run_all(fw: Framework, plan: Plan) -> Iterator[dict[str, Any]]:
    """Run every workload; yield ``{"workload", "params", "metrics"}`` or ``{"workload", "error"}``.

    Reads of a size come before its writes, so a read sees the owner's own bytes.
    A size that fails yields its errors and the other sizes still run.
    """
    try:
        procs, owner = fw.spawn_owner()
    except Exception as exc:
        for name in workload_names(plan):
            yield {"workload": name, "error": f"spawning the owner failed: {describe(exc)}"}
        return
    try:
        pid = owner.pid.call_one().get(timeout=SETUP_TIMEOUT)
    except Exception as exc:
        for name in workload_names(plan):
            yield {"workload": name, "error": f"asking the owner its pid failed: {describe(exc)}"}
        return
    measurable = pid != os.getpid() and os.path.isdir(f"/proc/{pid}/task")
    for nbytes in plan.repeats:
        yield from _one_size(owner, nbytes, plan, pid if measurable else None)
    try:
        fw.stop(procs)
    except Exception as exc:
        yield {"workload": "stop", "error": describe(exc)}
