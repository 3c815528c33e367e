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

ATTACH_TIMEOUT = 60.0
"""Seconds a worker may take to accept this controller (it may still be finishing another)."""

TRUST_ALL_CONNECTIONS = "trust_all_connections"
"""Monarch's ``ca`` for a job whose workers and controller run as one user (see `key_of`)."""


class UserKey:
    """The key of ``ca="trust_all_connections"``: the job's key from the environment
    (``DANAUS_JOB_KEY``, ``DANAUS_JOB_KEY_FILE``), else the user's own, a private file in
    their configuration folder made on first use. `USER_KEY` is its one instance."""

    def __repr__(self) -> str:
        return "USER_KEY"


USER_KEY = UserKey()

Key = str | bytes | os.PathLike[str] | UserKey | None
"""A job's key: its text (``str``/``bytes``), the path of a file holding it, or `USER_KEY`."""

CA = bytes | os.PathLike[str] | str
"""Monarch's ``ca``: ``"trust_all_connections"``, or (Danaus) the job's key as for ``key``."""


def key_of(key: Key, ca: CA | None) -> Key:
    """The job's key that ``attach_to_workers`` and ``run_worker_loop_forever`` use, given
    their ``key`` and Monarch's ``ca`` (one of them at most).

    Danaus authenticates every connection with the job's key, where Monarch
    takes a certificate authority (``ca``) and, so far, only
    ``"trust_all_connections"``. That value gives `USER_KEY`: the key the
    scheduler gave the job, or else one key per user, so that a worker and a
    controller a user starts on one machine (or on machines that share the
    user's home) attach without being given a key, and nobody else's can. A
    ``ca`` of bytes or a path is taken as the job's key itself (its text, or
    its file).
    """
    if ca is None:
        return key
    if key is not None:
        raise TypeError("give the job's key as key= or as ca=, not both")
    if ca == TRUST_ALL_CONNECTIONS:
        return USER_KEY
    if isinstance(ca, (bytes, os.PathLike)):
        return ca
    raise ValueError(
        f'ca must be "{TRUST_ALL_CONNECTIONS}", or the job\'s key as bytes or the path of its '
        f"file, not {ca!r}"
    )


def attach_to_workers(
    workers: Sequence[str],
    *,
    key: Key = None,
    ca: CA | None = None,
    name: str | None = None,
    timeout: float = ATTACH_TIMEOUT,
) -> HostMesh:
    """Attach to running workers; a host mesh of them, with dimension ``hosts``.

    ``workers`` are the workers' addresses (``tcp://10.0.0.2:26600`` or
    ``10.0.0.2:26600``). ``key`` is the job's key, which the workers hold too
    (None: from ``DANAUS_JOB_KEY`` or the file named by ``DANAUS_JOB_KEY_FILE``).
    Monarch's ``ca="trust_all_connections"`` is accepted in its place (`key_of`).
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
    key = key_of(key, ca)
    owner = context().actor_instance
    agents = owner.runtime.world.attach(workers, key, timeout)
    return HostMesh.attached(owner, agents, name or "hosts")
