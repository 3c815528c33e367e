"""The messaging workloads on torchmonarch, for `messaging.py --peer monarch`.

Runs under the python of ``benchmarks/.monarch-venv`` (never Danaus's venv), so
the two frameworks never share a process. Prints one JSON line of information,
then one per workload, in the shape `_workloads.run_all` yields.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import sys
from typing import Any

from _workloads import FULL, QUICK, Framework, run_all
from monarch.actor import Actor, endpoint, shutdown_context, this_host


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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
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
    print(json.dumps({"info": info}), flush=True)
    for result in run_all(Monarch(), QUICK if args.quick else FULL):
        print(json.dumps(result), flush=True)
    try:
        shutdown_context().get()
    except Exception as exc:
        print(f"shutdown_context: {exc}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
