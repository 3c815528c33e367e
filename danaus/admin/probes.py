"""What a proc reports about itself when the controller asks (through ``ProcAgent.probe``).

(Its threads' stacks, asked for one proc at a time, are `danaus.admin.stacks`.)

Cheap by design: it reads counters the runtime keeps anyway and two numbers
from the OS (its CPU time, and its resident memory through psutil), so asking
64 procs once a second costs the job next to nothing.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

import psutil

from danaus.admin.views import ActorView, FailureView, ProcView

if TYPE_CHECKING:
    from danaus.core.instance import Instance
    from danaus.core.runtime import Runtime
    from danaus.core.supervision import MeshFailure

def rss_bytes() -> int:
    """This process's resident memory now. (A proc is forked: the process is looked up each
    time, not kept from before the fork.)"""
    return int(psutil.Process().memory_info().rss)


def actor_view(instance: Instance) -> ActorView:
    running = instance.running_call
    return ActorView(
        actor_id=instance.actor_id,
        mesh_id=instance.key,
        mesh=instance.name,
        rank=instance.rank.rank,
        coords=dict(instance.rank),
        class_name=instance.class_name,
        state=instance.state.value,
        mailbox=instance.mailbox_depth,
        handled=instance.handled,
        running=running.method if running is not None else None,
    )


def failure_view(failure: MeshFailure) -> FailureView:
    return FailureView(
        proc=failure.proc,
        what=failure.actor_id,
        cause=failure.cause,
        mesh=failure.mesh_name,
        rank=failure.rank.rank,
        coords=dict(failure.rank),
        report=failure.report(),
        actor_class=failure.actor_class,
    )


def proc_view(runtime: Runtime) -> ProcView:
    """``runtime``'s proc now: its process's CPU and memory, its actors, its failures.

    The failures are those of actors that failed here, those of members of
    meshes that actors here own (a member on a proc that was killed cannot say
    so itself), and the procs this one learned are gone, but for clean exits.
    """
    failures = [failure_view(f) for f in [*runtime.failures(), *runtime.supervisor.failures()]]
    failures += [
        FailureView(proc=loss.proc, what=loss.proc, cause=loss.describe(), report=loss.describe())
        for loss in runtime.losses()
        if loss.exit_code != 0
    ]
    return ProcView(
        proc_id=runtime.proc_id,
        host=runtime.host,
        pid=runtime.pid,
        cpu_seconds=time.process_time(),
        rss_bytes=rss_bytes(),
        threads=threading.active_count(),
        actors=[actor_view(a) for a in runtime.actors()],
        failures=failures,
    )
