"""Tensor engine benchmarks: operations per second, inspect latency, to_mesh and reduce at 64 MiB.

Prints one JSON line per transport and workload. Nothing here asserts on speed.

    python benchmarks/tensor_engine.py                              # Danaus over tcp
    python benchmarks/tensor_engine.py --transport tcp,ucx          # several transports
    python benchmarks/tensor_engine.py --quick                      # small counts: a smoke test
    python benchmarks/tensor_engine.py --peer monarch --rounds 3    # alternating with Monarch

The workloads are `_tensor_workloads.py`'s: 1,000 dependent ``t = t + 1`` on
16 elements on 2 procs then one ``inspect`` (operations per second, the best
of three batches, and the controller's CPU per operation), the latency of
``inspect`` of a small tensor, a 64 MiB ``to_mesh`` between the procs of a
mesh (MB/s, MB = 10^6 bytes), and an in-place ``reduce_`` of 64 MiB over 4
procs. Once per run, raw gloo ``all_reduce`` of the same tensor over 4 plain
processes, without Danaus, is timed the same way (``reduce_raw_gloo``), with
the ratio of the engine's time to it (``danaus_over_raw_gloo``). Then
``streams_overlap``: matrix products on one stream of a proc while a ``to_mesh``
arrives on another, timed alone and together (``overlap``: 1 when the shorter
hides entirely behind the longer, 0 when they queue).

With ``--peer monarch`` the same workloads run on torchmonarch's tensor engine,
in a separate process of a separate virtualenv (``benchmarks/.monarch-tensor-venv``,
torch 2.14.1, the build torchmonarch 0.7.0 was made for; made on first use
unless ``--no-install``), round after round alternating with Danaus's run;
each line has the medians of the rounds, each round's figure
(``<metric>_runs``), Monarch's (``monarch_*``) and the ratios
(``danaus_over_monarch_<metric>_<lower|higher>_is_better``). Monarch 0.7.0
moves tensors between meshes only on CUDA, and its ``reduce`` fails on CPU: those
lines carry its error.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import torch
from _monarch import (
    TENSORS,
    add_arguments,
    line,
    log,
    median_of_runs,
    median_peer,
    print_line,
    print_report,
    run_danaus,
    run_peer,
)
from _tensor_workloads import (
    FULL,
    NAMES,
    QUICK,
    TensorFramework,
    raw_gloo_allreduce,
    run_all,
    streams_overlap,
)

import danaus

BASELINE = "reduce_raw_gloo"
OVERLAP = "streams_overlap"
FRAMEWORK = TensorFramework(danaus.this_host, danaus.fetch_shard)


@danaus.remote(propagate=lambda: None)
def one_thread() -> None:
    """torch on one thread, on each proc of the active mesh."""
    torch.set_num_threads(1)


def transport_list(value: str) -> list[str]:
    names = [name.strip() for name in value.split(",")]
    if not all(names):
        raise argparse.ArgumentTypeError(f"not a comma-separated list of transports: {value!r}")
    return names


def one_run(transport: str, quick: bool) -> list[dict[str, Any]]:
    """Danaus's workloads on ``transport`` (torch preloaded by the fork servers), and the
    raw gloo baseline."""
    plan = QUICK if quick else FULL
    labels = {"transport": transport}
    if transport != "sim":
        labels["preload"] = ["torch"]
    results = run_danaus(
        labels,
        NAMES,
        lambda: run_all(FRAMEWORK, plan),
        _progress,
    )
    try:
        baseline = {"workload": BASELINE, "metrics": raw_gloo_allreduce(plan)}
    except Exception as exc:
        baseline = {"workload": BASELINE, "error": f"{type(exc).__name__}: {exc}"}
    _progress(baseline)
    streams = run_danaus(
        labels,
        [OVERLAP],
        lambda: iter(
            [
                {
                    "workload": OVERLAP,
                    "metrics": streams_overlap(FRAMEWORK, danaus.Stream, one_thread, plan),
                }
            ]
        ),
        _progress,
    )
    engine = next((r for r in results if r["workload"] == "reduce_64MiB_4procs"), {})
    if "metrics" in engine and "metrics" in baseline:
        ratio = engine["metrics"]["median_s"] / baseline["metrics"]["median_s"]
        engine["metrics"]["danaus_over_raw_gloo"] = round(ratio, 3)
    return [*results, baseline, *streams]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--transport",
        type=transport_list,
        default=["tcp"],
        help="Danaus transports, comma-separated: tcp (default), ucx, sim",
    )
    parser.add_argument("--quick", action="store_true", help="small counts, for a smoke test")
    add_arguments(parser)
    args = parser.parse_args(argv)
    for transport in args.transport:
        labels = {"transport": transport}
        ours, peers = [], []
        for round_ in range(args.rounds):
            started = time.perf_counter()
            ours.append(one_run(transport, args.quick))
            took = time.perf_counter() - started
            log(f"round {round_ + 1}: danaus {transport} done in {took:.1f} s")
            if args.peer is not None:
                peers.append(run_peer(args, suite="tensor", env=TENSORS))
        results = median_of_runs(ours)
        if args.peer is None:
            for result in results:
                print_line(line(labels, result))
        else:
            print_report([(labels, result) for result in results], median_peer(peers))
    return 0


def _progress(result: dict[str, Any]) -> None:
    log(f"danaus {result['workload']}: {result.get('metrics', result.get('error'))}")


if __name__ == "__main__":
    sys.exit(main())
