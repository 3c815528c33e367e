"""What ``srun`` runs on each node of a `SlurmJob`'s allocation: that node's worker.

``python -m danaus.job.slurm_node DIRECTORY PORT``. The node's name comes
from SLURM (``SLURMD_NODENAME``) and its address from SLURM's record of the
node (``NodeAddr``); the worker listens there, reads the job's key from the
job's directory (a file only its owner can read) and writes the address it
listens on to ``DIRECTORY/workers/NODE`` once it listens.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from danaus.job.slurm_commands import node_address
from danaus.workers import run_worker_loop_forever


def listen_address(address: str, port: int) -> str:
    """``ADDRESS:PORT``, bracketing an IPv6 address."""
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


def main(argv: list[str]) -> None:
    directory, port = Path(argv[0]), int(argv[1])
    node = os.environ["SLURMD_NODENAME"]
    run_worker_loop_forever(
        address=listen_address(node_address(node), port),
        key=directory / "job.key",
        name=node,
        address_file=directory / "workers" / node,
    )


if __name__ == "__main__":
    main(sys.argv[1:])
