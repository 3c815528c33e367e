"""Mesh-up through a SLURM job: three nodes of a SLURM cluster on this host, two procs on each.

Starts a cluster of three SLURM nodes on this host (``tools/slurm-cluster.sh``,
in a temporary directory, on controller port 6827 so that it can run next to
the tests' cluster), then for each run: `SlurmJob.apply` (``sbatch``, an
``srun`` step starting a worker on each node, every worker listening),
``state()`` and 2 procs per host with an actor each, every actor answered;
then `SlurmJob.kill` (``scancel``, until SLURM has ended the job). Prints one
JSON line, ``slurm_mesh_up``: the medians, minima and maxima over the runs of
``mesh_up_s`` (apply to every actor answered), of ``apply_s`` (its part until
every worker listens) and of ``kill_s``.

Without root or SLURM (`make system-deps` installs it), prints one line saying why, and exits 0.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import danaus  # noqa: E402
from danaus import Actor, context, endpoint  # noqa: E402
from danaus.job import SlurmJob  # noqa: E402

HOSTS = 3
PER_HOST = 2
SCRIPT = ROOT / "tools" / "slurm-cluster.sh"


class Peer(Actor):
    @endpoint
    def ping(self) -> int:
        return context().actor_instance.rank.rank


def unavailable() -> str | None:
    if os.geteuid() != 0:
        return "needs root (to start munged and slurmd)"
    if shutil.which("slurmctld") is None or shutil.which("munged") is None:
        return "SLURM is not installed (slurm-wlm and munge: make system-deps)"
    return None


def one_run(directory: Path) -> dict[str, float]:
    job = SlurmJob(meshes={"hosts": HOSTS}, port=0, directory=directory)
    start = time.perf_counter()
    job.apply()
    applied = time.perf_counter()
    danaus.configure(transport="tcp")
    try:
        peers = job.state().hosts.spawn_procs(per_host={"gpus": PER_HOST}).spawn("peers", Peer)
        answered = peers.ping.call().get(timeout=300)
        up = time.perf_counter()
        assert len(answered) == HOSTS * PER_HOST
    finally:
        danaus.shutdown()
        before_kill = time.perf_counter()
        job.kill()
    return {"mesh_up_s": up - start, "apply_s": applied - start,
            "kill_s": time.perf_counter() - before_kill}


def summary(runs: list[dict[str, float]]) -> dict[str, object]:
    row: dict[str, object] = {"benchmark": "slurm_mesh_up", "transport": "tcp", "hosts": HOSTS,
                              "procs_per_host": PER_HOST, "runs": len(runs)}
    for name in ("mesh_up_s", "apply_s", "kill_s"):
        values = [run[name] for run in runs]
        stem = name.removesuffix("_s")
        row[f"{stem}_median_s"] = round(statistics.median(values), 3)
        row[f"{stem}_min_s"] = round(min(values), 3)
        row[f"{stem}_max_s"] = round(max(values), 3)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    why = unavailable()
    if why is not None:
        print(json.dumps({"benchmark": "slurm_mesh_up", "skipped": why}))
        return
    with tempfile.TemporaryDirectory(prefix="danaus-slurm-") as scratch:
        cluster = Path(scratch) / "cluster"
        env = {**os.environ, "SLURM_CLUSTER_PORT": "6827"}
        started = subprocess.run([str(SCRIPT), "start", str(cluster)], env=env,
                                 capture_output=True, text=True)
        try:
            if started.returncode == 2:
                print(json.dumps({"benchmark": "slurm_mesh_up", "skipped": started.stderr.strip()}))
                return
            if started.returncode != 0:
                raise SystemExit(f"the SLURM cluster did not start: {started.stderr}")
            os.environ["SLURM_CONF"] = str(cluster / "slurm.conf")
            runs = [one_run(Path(scratch) / f"job{i}") for i in range(args.runs)]
            print(json.dumps(summary(runs)), flush=True)
        finally:
            subprocess.run([str(SCRIPT), "stop", str(cluster)], env=env, check=True)


if __name__ == "__main__":
    main()
