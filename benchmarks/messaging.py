"""Messaging benchmarks: round trips, pipelining, broadcast, payloads and start-up.

Prints one JSON line per workload (see docs/performance.md for what each one
measures). Nothing here asserts on speed.

    python benchmarks/messaging.py                   # Danaus over tcp
    python benchmarks/messaging.py --transport sim   # any transport Danaus knows
    python benchmarks/messaging.py --quick           # small counts, a smoke test
    python benchmarks/messaging.py --no-encrypt      # tcp with encrypt=False (in clear)
    python benchmarks/messaging.py --peer monarch    # also run torchmonarch, side by side
    python benchmarks/messaging.py --peer monarch --rounds 3   # alternating, medians of 3

With ``--peer monarch`` the same workloads run on torchmonarch, in a separate
process of a separate virtualenv (``benchmarks/.monarch-venv``, made on first
use unless ``--no-install``), after the Danaus run has finished. Each line then
also carries Monarch's figures (``monarch_*``) and the ratios Danaus/Monarch
(``danaus_over_monarch_<metric>_<lower|higher>_is_better``).
"""

from __future__ import annotations

import argparse
import sys
import time

from _monarch import (
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
from _workloads import FULL, QUICK, MeshFramework, run_all, workload_names

import danaus


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--transport", default="tcp", help="Danaus transport: tcp (default), sim, ucx, ..."
    )
    parser.add_argument("--quick", action="store_true", help="small counts, for a smoke test")
    parser.add_argument(
        "--no-encrypt",
        action="store_true",
        help="configure the transport with encrypt=False (tcp, ucx): authenticated, in clear",
    )
    add_arguments(parser)
    args = parser.parse_args(argv)
    counts = QUICK if args.quick else FULL
    options = {"encrypt": False} if args.no_encrypt else {}
    labels = {"transport": args.transport, **options}
    names = workload_names(counts)

    setup = f"import danaus as api\n\napi.configure(transport={args.transport!r}, **{options!r})"

    def workloads():
        return run_all(MeshFramework(danaus, setup), counts)

    if args.peer is None:
        if args.rounds == 1:
            run_danaus(labels, names, workloads, lambda r: print_line(line(labels, r)))
            return 0
        runs = [run_danaus(labels, names, workloads, _progress) for _ in range(args.rounds)]
        for result in median_of_runs(runs):
            print_line(line(labels, result))
        return 0

    ours, peers = [], []
    for round_ in range(args.rounds):
        started = time.perf_counter()
        ours.append(run_danaus(labels, names, workloads, _progress))
        log(f"round {round_ + 1}: danaus done in {time.perf_counter() - started:.1f} s")
        peers.append(run_peer(args))
    print_report([(labels, result) for result in median_of_runs(ours)], median_peer(peers))
    return 0


def _progress(result: dict) -> None:
    log(f"danaus {result['workload']}: {result.get('metrics', result.get('error'))}")


if __name__ == "__main__":
    sys.exit(main())
