"""What a proc reports about itself when the controller asks (through ``ProcAgent.probe``).

Cheap by design: it reads counters the runtime keeps anyway and two numbers
from the OS, so asking 64 procs once a second costs the job next to nothing.
"""

from __future__ import annotations

import contextlib
import os
import resource
import threading
import time
from typing import TYPE_CHECKING

from danaus.admin.views import ActorView, FailureView, ProcView

if TYPE_CHECKING:
    from danaus.core.instance import Instance
    from danaus.core.runtime import Runtime

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def rss_bytes() -> int:
    """This process's resident memory now (its peak where /proc is missing)."""
    with contextlib.suppress(OSError, ValueError, IndexError), open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * _PAGE
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


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


def proc_view(runtime: Runtime) -> ProcView:
    """``runtime``'s proc now: its process's CPU and memory, its actors, its failures."""
    failures = [
        FailureView(proc=f.proc, what=f.actor_id, cause=f.cause, mesh=f.mesh_name, rank=f.rank.rank)
        for f in runtime.failures()
    ]
    failures += [
        FailureView(proc=loss.proc, what=loss.proc, cause=loss.describe())
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
