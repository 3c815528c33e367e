"""The benchmarks' workloads on torchmonarch, for ``--peer monarch``: `messaging.py`, `rdma.py` and
`tensor_engine.py`.

Runs under the python of ``benchmarks/.monarch-venv`` (never Danaus's venv), so
the two frameworks never share a process. Prints one JSON line of information,
then one per workload, in the shape `_workloads.run_all` (``--suite messaging``,
the default), `_rdma_workloads.run_all` (``--suite rdma``) or
`_tensor_workloads.run_all` (``--suite tensor``) yields.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import sys

import _rdma_workloads
import monarch.actor
from _workloads import FULL, QUICK, MeshFramework, run_all
from monarch.actor import shutdown_context
from monarch.rdma import RDMABuffer, get_rdma_backend


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", choices=["messaging", "rdma", "tensor"], default="messaging")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--transport", help="passed to monarch.actor.enable_transport()")
    args = parser.parse_args()
    if args.transport:
        from monarch.actor import enable_transport

        enable_transport(args.transport)
    info = {
        "version": importlib.metadata.version("torchmonarch"),
        "transport": args.transport or "default",
    }
    if args.suite == "tensor":
        import _tensor_workloads
        import torch

        info["torch"] = torch.__version__
        framework = _tensor_workloads.TensorFramework(monarch.actor.this_host, monarch.fetch_shard)
        plan = _tensor_workloads.QUICK if args.quick else _tensor_workloads.FULL
        results = _tensor_workloads.run_all(framework, plan)
    elif args.suite == "rdma":
        info["rdma_backend"] = get_rdma_backend()
        plan = _rdma_workloads.QUICK if args.quick else _rdma_workloads.FULL
        owner = _rdma_workloads.OwnerFramework(monarch.actor, RDMABuffer)
        results = _rdma_workloads.run_all(owner, plan)
    else:
        setup = "import monarch.actor as api"
        if args.transport:
            setup += f"\n\napi.enable_transport({args.transport!r})"
        framework = MeshFramework(monarch.actor, setup)
        results = run_all(framework, QUICK if args.quick else FULL)
    print(json.dumps({"info": info}), flush=True)
    done: list[str] = []
    if args.suite == "tensor":
        monarch.actor.unhandled_fault_hook = lambda failure: _give_up(failure, done)
    for result in results:
        print(json.dumps(result), flush=True)
        done.append(result["workload"])
    try:
        shutdown_context().get()
    except Exception as exc:
        print(f"shutdown_context: {exc}", file=sys.stderr)
    return 0


def _give_up(failure: object, done: list[str]) -> None:
    """Monarch's tensor engine workers failed (its default hook would end the process without
    a word): report the failure for the workload that was running and those not yet run."""
    import _tensor_workloads

    error = f"Monarch's tensor workers failed: {str(failure).splitlines()[0][:300]}"
    for name in _tensor_workloads.NAMES:
        if name not in done:
            print(json.dumps({"workload": name, "error": error}), flush=True)
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
