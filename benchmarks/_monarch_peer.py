"""The benchmarks' workloads on torchmonarch, for `messaging.py` and `rdma.py` ``--peer monarch``.

Runs under the python of ``benchmarks/.monarch-venv`` (never Danaus's venv), so
the two frameworks never share a process. Prints one JSON line of information,
then one per workload, in the shape `_workloads.run_all` (``--suite messaging``,
the default) or `_rdma_workloads.run_all` (``--suite rdma``) yields.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import sys
import zlib
from typing import Any

import _rdma_workloads
import numpy as np
from _workloads import FULL, QUICK, Framework, run_all
from monarch.actor import Actor, endpoint, shutdown_context, this_host
from monarch.rdma import RDMABuffer, get_rdma_backend


class Bench(Actor):
    """The actor every workload talks to (the same as messaging.py's)."""

    @endpoint
    def echo(self, x: Any) -> Any:
        return x

    @endpoint
    def length(self, payload: Any) -> int:
        nbytes = getattr(payload, "nbytes", None)
        return len(payload) if nbytes is None else nbytes


class Monarch(Framework):
    def spawn_procs(self, count: int) -> Any:
        return this_host().spawn_procs(per_host={"gpus": count})

    def spawn(self, procs: Any) -> Any:
        return procs.spawn("bench", Bench)

    def stop(self, procs: Any) -> None:
        procs.stop().get()

    def tensor(self, nbytes: int) -> Any:
        import torch

        return torch.rand(nbytes // 4, dtype=torch.float32)


class Owner(Actor):
    """Holds the registered memory for the RDMA workloads, as rdma.py's does.

    Monarch registers tensors and memoryviews, not numpy arrays, so the array
    is registered through a memoryview of it (no copy).
    """

    def __init__(self) -> None:
        self.memory: np.ndarray | None = None
        self.buffer: RDMABuffer | None = None

    @endpoint
    def register(self, nbytes: int) -> RDMABuffer:
        self.memory = np.random.default_rng(0).integers(0, 256, nbytes, dtype=np.uint8)
        self.buffer = RDMABuffer(memoryview(self.memory))
        return self.buffer

    @endpoint
    def checksum(self) -> int:
        return zlib.crc32(self.memory)

    @endpoint
    def release(self) -> None:
        self.buffer.drop().get()
        self.buffer = self.memory = None


class MonarchRdma(_rdma_workloads.Framework):
    def spawn_owner(self) -> tuple[Any, Any]:
        procs = this_host().spawn_procs(per_host={"procs": 1})
        return procs, procs.spawn("owner", Owner)

    def stop(self, procs: Any) -> None:
        procs.stop().get()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", choices=["messaging", "rdma"], default="messaging")
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
    if args.suite == "rdma":
        info["rdma_backend"] = get_rdma_backend()
        plan = _rdma_workloads.QUICK if args.quick else _rdma_workloads.FULL
        results = _rdma_workloads.run_all(MonarchRdma(), plan)
    else:
        results = run_all(Monarch(), QUICK if args.quick else FULL)
    print(json.dumps({"info": info}), flush=True)
    for result in results:
        print(json.dumps(result), flush=True)
    try:
        shutdown_context().get()
    except Exception as exc:
        print(f"shutdown_context: {exc}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
