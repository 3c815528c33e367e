"""Jobs: hosts that a scheduler starts workers on, named as host meshes (Monarch's job API).

A job describes the hosts a program needs as named meshes, ``{"trainers":
4}``. `Job.apply` starts them (local processes, a SLURM allocation, Kubernetes
pods), `Job.state` attaches this controller and returns them as host meshes
(``job.state().trainers``), and `Job.kill` ends everything the job started.
`load` finds an applied job again from its directory, in any process.
"""

from danaus.job.base import Job, JobNotApplied, SchedulerMissing, load
from danaus.job.kubernetes import KubernetesJob
from danaus.job.local import LocalJob
from danaus.job.slurm import SlurmJob
from danaus.job.state import JobState

__all__ = [
    "Job",
    "JobNotApplied",
    "JobState",
    "KubernetesJob",
    "LocalJob",
    "SchedulerMissing",
    "SlurmJob",
    "load",
]
