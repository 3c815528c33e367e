"""A SLURM cluster of three nodes on this host, shared by the session's SLURM tests."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tools" / "slurm-cluster.sh"


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """``tools/slurm-cluster.sh`` started for the session (SLURM_CONF set); stopped at its end."""
    if os.geteuid() != 0:
        pytest.skip("a SLURM cluster on this host needs root (to start munged and slurmd)")
    if shutil.which("slurmctld") is None or shutil.which("munged") is None:
        pytest.skip("SLURM is not installed (slurm-wlm and munge: make system-deps)")
    directory = tmp_path_factory.mktemp("slurm")
    started = subprocess.run(
        [str(SCRIPT), "start", str(directory)], capture_output=True, text=True, timeout=300
    )
    if started.returncode == 2:
        pytest.skip(started.stderr.strip())
    previous = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(directory / "slurm.conf")
    try:
        assert started.returncode == 0, started.stderr
        yield directory
    finally:
        subprocess.run([str(SCRIPT), "stop", str(directory)], timeout=120, check=True)
        if previous is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = previous
