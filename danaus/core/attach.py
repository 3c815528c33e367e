"""Hosts from elsewhere: a host mesh of workers that a job system started on other machines.

Each worker (``danaus worker``, `danaus.run_worker_loop_forever`) runs a host
agent that waits for a controller. `attach_to_workers` makes this controller
theirs and returns them as a host mesh with one dimension, ``hosts``; procs
are spawned on it as on any host mesh. How the controller proves to the
workers that it belongs to their job, and they to it, is the transport's
business (`World.attach`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from danaus.core.context import context
from danaus.core.mesh import HostMesh
from danaus.core.owned import OwnedMesh
from danaus.core.shape import Extent, Shape

ATTACH_TIMEOUT = 60.0
"""Seconds a worker may take to accept this controller (it may still be finishing another)."""

Key = str | bytes | os.PathLike[str] | None
"""A job's key: its text (``str``/``bytes``), or the path of a file holding it."""


def attach_to_workers(
    workers: Sequence[str],
    *,
    key: Key = None,
    name: str | None = None,
    timeout: float = ATTACH_TIMEOUT,
) -> HostMesh:
    """Attach to running workers; a host mesh of them, with dimension ``hosts``.

    ``workers`` are the workers' addresses (``tcp://10.0.0.2:26600`` or
    ``10.0.0.2:26600``). ``key`` is the job's key, which the workers hold too
    (None: from ``DANAUS_JOB_KEY`` or the file named by ``DANAUS_JOB_KEY_FILE``).
    Returns at once: the mesh's ``initialized`` settles once every worker has
    accepted this controller, and messages to the hosts wait until then. A
    worker that cannot be attached within ``timeout`` seconds is reported as a
    lost host, with the reason.

    ``stop()`` ends what runs on the hosts and leaves the workers waiting for
    another controller; ``shutdown()`` (also at the end of ``async with``)
    ends the workers too. The controller's exit stops them.
    """
    if isinstance(workers, (str, bytes)):
        raise TypeError("workers must be a list of addresses, not one string")
    workers = list(workers)
    if not workers:
        raise ValueError("attach_to_workers needs at least one worker address")
    for worker in workers:
        if not isinstance(worker, str) or not worker:
            raise TypeError(f"a worker's address must be a non-empty str, not {worker!r}")
    if len(set(workers)) != len(workers):
        raise ValueError(f"a worker is named twice in {workers}")
    if not timeout > 0:
        raise ValueError(f"timeout must be positive, not {timeout!r}")
    owner = context().actor_instance
    agents = owner._runtime.world.attach(workers, key, timeout)
    owned = OwnedMesh(name or "hosts", HostMesh._kind, owner)
    mesh = HostMesh(agents, Shape.from_extent(Extent(["hosts"], [len(agents)])), owned)
    return mesh._own(owned)
