"""What an idle proc costs its host in memory: where `IDLE_PROC_BYTES` comes from.

Prints one JSON line per way of starting procs: forked from the fork server
(the default), and as new interpreters (a `BootstrapCommand`). For each, the
median over the procs of their own memory (USS), their share of memory they
share (PSS) and their resident set (RSS), in MiB, read from ``/proc`` with
psutil once they are up and idle. The host budget
(`danaus.transports.tcp.budget`) counts the PSS of the fork server's procs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

import psutil

import danaus
from danaus import Actor, BootstrapCommand, endpoint, this_host

MiB = 1024 * 1024


class Idle(Actor):
    @endpoint
    def pid(self) -> int:
        return os.getpid()


def measure(procs: int, command: BootstrapCommand | None) -> dict[str, float]:
    mesh = this_host().spawn_procs(per_host={"w": procs}, bootstrap_command=command)
    pids = list(mesh.spawn("idle", Idle).pid.call().get(timeout=120).values())
    memory = [psutil.Process(pid).memory_full_info() for pid in pids]
    mesh.stop().get(timeout=60)
    return {
        f"{kind}_mib": round(statistics.median(getattr(m, kind) for m in memory) / MiB, 1)
        for kind in ("uss", "pss", "rss")
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--procs", type=int, default=8)
    parser.add_argument("--transport", default="tcp", choices=["tcp", "ucx"])
    args = parser.parse_args()
    danaus.configure(transport=args.transport)
    interpreter = BootstrapCommand(sys.executable, args=["-m", "danaus.transports.tcp.worker"])
    for started, command in (("fork_server", None), ("interpreter", interpreter)):
        figures = measure(args.procs, command)
        row = {"workload": "idle_proc_memory", "started": started, "procs": args.procs}
        print(json.dumps({**row, "transport": args.transport, **figures}), flush=True)
    danaus.shutdown()


if __name__ == "__main__":
    main()
