"""SlurmJob on a SLURM cluster of three nodes on this host (``tools/slurm-cluster.sh``)."""

from __future__ import annotations

import os
import subprocess

import pytest

import danaus
from danaus import Actor, endpoint
from danaus.job import JobNotApplied, SchedulerMissing, SlurmJob
from tests.job.conftest import ROOT
from tests.multihost.conftest import descendants
from tests.tcp.conftest import alive


class Node(Actor):
    @endpoint
    def where(self) -> tuple[str, int]:
        return os.environ.get("SLURMD_NODENAME", ""), os.getpid()


def job_processes(directory: str) -> list[int]:
    """Every process of the job's workers on this host: the node entries and their trees."""
    roots = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                    if b"danaus.job.slurm_node\0" + directory.encode() in cmdline.read():
                        roots.append(int(entry))
            except OSError:
                continue
    return [pid for root in roots for pid in (root, *descendants(root))]


def queue() -> str:
    return subprocess.run(["squeue", "-h"], capture_output=True, text=True, check=True).stdout


def test_a_mesh_across_three_nodes_then_kill_leaves_nothing(slurm_cluster, tmp_path):
    job = SlurmJob(meshes={"trainers": 3}, port=0, directory=tmp_path / "job")
    job.apply()
    try:
        assert job.running["nodes"] == ["n1", "n2", "n3"]
        danaus.configure(transport="tcp")
        trainers = job.state().trainers
        assert trainers.sizes == {"hosts": 3}
        assert job.state().trainers is trainers
        answers = trainers.spawn_procs(per_host={"gpus": 2}).spawn("n", Node).where.call()
        answers = answers.get(timeout=120)
        assert answers.sizes == {"hosts": 3, "gpus": 2}
        nodes = [answers.item(hosts=h, gpus=g)[0] for h in range(3) for g in range(2)]
        assert nodes == ["n1", "n1", "n2", "n2", "n3", "n3"]
        pids = job_processes(str(job.directory)) + [pid for _, pid in answers.values()]
        assert len(pids) > 6
    finally:
        danaus.shutdown()
        job.kill()
    assert not [pid for pid in pids if alive(pid)], "a worker or proc outlived kill()"
    assert queue() == ""
    assert not (job.directory / "job.key").exists()
    with pytest.raises(JobNotApplied):
        job.state()


def test_batch_mode_runs_getting_started_on_the_allocation(slurm_cluster, tmp_path):
    """The example, unchanged, as the job's controller inside a three-node allocation."""
    job = SlurmJob(meshes={"hosts": 3}, port=0, directory=tmp_path / "job")
    job.apply(client_script=ROOT / "examples" / "getting_started.py")
    log = job.output
    try:
        assert job.wait(timeout=300) == "COMPLETED", log.read_text()
    finally:
        job.kill()
    output = log.read_text()
    assert "spawned 24 trainers, mesh sizes {'hosts': 3, 'gpus': 8}" in output
    assert queue() == ""
    with pytest.raises(RuntimeError, match="that script's"):
        job.running = {"job_id": "1", "batch": True}
        job.addresses()


def test_without_slurm_apply_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SchedulerMissing, match="sbatch is not on PATH"):
        SlurmJob(meshes={"trainers": 1}, directory=tmp_path / "job").apply()


def test_bad_input_is_refused(tmp_path):
    with pytest.raises(ValueError, match="positive number of hosts"):
        SlurmJob(meshes={"trainers": 0})
    with pytest.raises(ValueError, match="Python identifier"):
        SlurmJob(meshes={"the trainers": 1})
    with pytest.raises(TypeError, match="list of options"):
        SlurmJob(meshes={"trainers": 1}, sbatch_args="--exclusive")
    with pytest.raises(FileNotFoundError, match="no client script"):
        SlurmJob(meshes={"t": 1}, directory=tmp_path).apply(client_script=tmp_path / "no.py")
