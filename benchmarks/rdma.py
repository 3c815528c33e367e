"""RDMA benchmarks: MB/s of RDMABuffer.read_into and write_from at 1, 64 and 256 MiB.

Prints one JSON line per transport, encryption setting, size and operation.
Nothing here asserts on speed.

    python benchmarks/rdma.py                          # Danaus over tcp, encrypted and in clear
    python benchmarks/rdma.py --transport tcp,ucx      # several transports, side by side
    python benchmarks/rdma.py --no-encrypt             # tcp (and ucx) with encrypt=False only
    python benchmarks/rdma.py --quick                  # 1 and 16 MiB, two repeats: a smoke test
    python benchmarks/rdma.py --peer monarch           # also torchmonarch's monarch.rdma

An owner actor on a worker proc fills a numpy uint8 array of the size with
random bytes, registers it as an `RDMABuffer` and returns the handle. The
controller then times ``buffer.read_into(dst).get()``, and afterwards
``buffer.write_from(src).get()``, into and out of its own memory: one untimed
warm-up, then a few timed transfers (20 of 1 MiB, 5 of 64 MiB, 3 of 256 MiB).
Each line reports the median (``median_s``) and the size over it
(``mb_per_s``, MB = 10^6 bytes), and the CPU time the owner's process spent
during each transfer (``owner_cpu_ms``, median; ``owner_cpu_pct``, that over
the transfer's time), read from ``/proc`` outside the owner, on every transport
but sim. Once per size and operation, the CRC-32 of the controller's memory is
compared with the owner's: a transfer that moved the wrong bytes, or none, is
reported as an error instead of a speed.

Encryption: tcp moves RDMA data over its job sockets, which CURVE encrypts
unless ``configure(encrypt=False)``, and encryption caps bulk throughput. So by
default tcp runs twice, encrypted and then in clear, and each tcp or ucx line
says which in ``encrypt``. ucx runs once: its transfers travel over UCX, which
CURVE never touches (``encrypt`` only changes its control sockets); they are
one-sided, unless ``DANAUS_UCX_RMA=off`` (set it to measure the served
fallback the same way).
``--no-encrypt`` runs tcp and ucx with ``encrypt=False`` only. On sim the
figures are wall-clock costs of the simulator copying the bytes in one OS
process, not the speed of a network.

With ``--peer monarch`` the same sizes run on torchmonarch's ``monarch.rdma``,
in a separate process of a separate virtualenv (``benchmarks/.monarch-venv``,
made on first use unless ``--no-install``), after the Danaus runs have
finished, measured by the same code (`_rdma_workloads.py`). Each line then also
carries Monarch's figures (``monarch_*``) and the ratios Danaus/Monarch
(``danaus_over_monarch_<metric>_<lower|higher>_is_better``).
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from _monarch import add_arguments, line, log, print_line, print_report, run_danaus, run_peer
from _rdma_workloads import FULL, QUICK, OwnerFramework, run_all, workload_names

import danaus
from danaus.rdma import RDMABuffer


def runs(transports: list[str], no_encrypt: bool) -> list[dict[str, Any]]:
    """The labels of each Danaus run: its transport and, except on sim, ``encrypt``."""
    labels: list[dict[str, Any]] = []
    for transport in transports:
        if transport == "sim":
            labels.append({"transport": transport})
        elif transport == "tcp" and not no_encrypt:
            labels += [
                {"transport": "tcp", "encrypt": True},
                {"transport": "tcp", "encrypt": False},
            ]
        else:
            labels.append({"transport": transport, "encrypt": not no_encrypt})
    return labels


def transport_list(value: str) -> list[str]:
    names = [name.strip() for name in value.split(",")]
    if not all(names):
        raise argparse.ArgumentTypeError(f"not a comma-separated list of transports: {value!r}")
    return names


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--transport",
        type=transport_list,
        default=["tcp"],
        help="Danaus transports, comma-separated: tcp (default), sim, ucx",
    )
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke test")
    parser.add_argument(
        "--no-encrypt",
        action="store_true",
        help="run tcp and ucx with encrypt=False only (tcp runs both ways by default)",
    )
    add_arguments(parser)
    args = parser.parse_args(argv)
    plan = QUICK if args.quick else FULL
    names = workload_names(plan)

    def workloads():
        return run_all(OwnerFramework(danaus, RDMABuffer), plan)

    if args.peer is None:
        for labels in runs(args.transport, args.no_encrypt):
            run_danaus(
                labels, names, workloads, lambda r, labels=labels: print_line(line(labels, r))
            )
        return 0

    ours = []
    for labels in runs(args.transport, args.no_encrypt):
        name = " ".join(f"{key}={value}" for key, value in labels.items())
        started = time.perf_counter()
        results = run_danaus(
            labels,
            names,
            workloads,
            lambda r, name=name: log(
                f"danaus {name} {r['workload']}: {r.get('metrics', r.get('error'))}"
            ),
        )
        log(f"danaus {name} done in {time.perf_counter() - started:.1f} s")
        ours += [(labels, result) for result in results]
    print_report(ours, run_peer(args, suite="rdma"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
