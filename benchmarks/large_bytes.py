"""64 MiB arguments to one proc: the rate, and the CPU time each side spends per call.

As the ``payload`` workloads of `messaging.py` (``length(data)`` round trips
with ``call_one``, after a warm-up call), on a mesh of one proc, with the CPU
time per call of the caller's process and of the actor's process (every thread,
user and system, from ``os.times``, over the timed calls and one more):
figures that other load on the machine disturbs far less than the rate. Runs on
Danaus (its default transport, ``tcp``, encrypted), or on Monarch under a Python
that has it.

    python benchmarks/large_bytes.py                         # Danaus, tcp, bytes
    python benchmarks/large_bytes.py --kind tensor
    benchmarks/.monarch-venv/bin/python benchmarks/large_bytes.py --api monarch
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import sys
from typing import Any

from _workloads import MIB, bench_actor, timed


def _cpu_s() -> float:
    times = os.times()
    return times.user + times.system


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--api", choices=["danaus", "monarch"], default="danaus")
    parser.add_argument("--kind", choices=["bytes", "tensor"], default="bytes")
    parser.add_argument("--mib", type=int, default=64)
    parser.add_argument("--calls", type=int, default=10)
    args = parser.parse_args(argv)
    api: Any = importlib.import_module("danaus" if args.api == "danaus" else "monarch.actor")

    class Timed(bench_actor(api)):  # type: ignore[misc]
        @api.endpoint
        def cpu_s(self) -> float:
            return _cpu_s()

    procs = api.this_host().spawn_procs(per_host={"gpus": 1})
    one = procs.spawn("bench", Timed)
    if args.kind == "bytes":
        make = os.urandom
    else:
        import torch

        def make(nbytes: int) -> Any:
            return torch.rand(nbytes // 4, dtype=torch.float32)

    nbytes = args.mib * MIB
    value = make(nbytes)

    def call(_: int) -> None:
        if one.length.call_one(value).get() != nbytes:
            raise AssertionError("the actor received a wrong number of bytes")

    call(0)  # warm-up: the connection, its kept buffers
    caller, actor = _cpu_s(), one.cpu_s.call_one().get()
    samples = timed(call, 1, args.calls)
    caller, actor = _cpu_s() - caller, one.cpu_s.call_one().get() - actor
    median = statistics.median(samples)
    line = {
        "workload": f"large_{args.kind}",
        "api": args.api,
        "bytes": nbytes,
        "calls": args.calls,
        "mb_per_s": round(nbytes / median / 1e6, 1),
        "median_ms": round(median * 1e3, 3),
        "caller_cpu_ms_per_call": round(caller / (args.calls + 1) * 1e3, 1),
        "actor_cpu_ms_per_call": round(actor / (args.calls + 1) * 1e3, 1),
    }
    print(json.dumps(line), flush=True)
    procs.stop().get()
    return 0


if __name__ == "__main__":
    sys.exit(main())
