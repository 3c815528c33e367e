"""The ``tcp`` transport: real processes talking over authenticated ZeroMQ sockets."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from danaus.core.awake import MAX_WAIT_SPIN_US, WAIT_SPIN_US
from danaus.core.faults import HostControl
from danaus.transports.tcp.forkserver import preload_from
from danaus.transports.tcp.limits import Limits
from danaus.transports.tcp.world import (
    ADMIN_HOST,
    HEARTBEAT_INTERVAL,
    HEARTBEAT_TIMEOUT,
    TcpWorld,
    attach_plan,
    bind_host_from,
    is_loopback,
    workers_from,
)

__all__ = ["TcpWorld", "World", "configured", "create_world"]

World = TcpWorld
"""The world class of this transport (workers make theirs with ``World.worker``)."""


def configured(
    heartbeat_interval: float = HEARTBEAT_INTERVAL,
    heartbeat_timeout: float = HEARTBEAT_TIMEOUT,
    bind_host: str | None = None,
    trace: bool | str | None = None,
    encrypt: bool = True,
    admin: bool = True,
    admin_host: str = ADMIN_HOST,
    workers: Sequence[str] | None = None,
    job_key: Any = None,
    max_message_bytes: int | None = None,
    frame_bytes: int | None = None,
    handshake_timeout: float | None = None,
    max_pending_handshakes: int | None = None,
    max_procs_per_host: int | None = None,
    host_control: HostControl | None = None,
    preload: Sequence[str] | None = None,
    home_cpus: bool = True,
    wait_spin_us: int = WAIT_SPIN_US,
) -> None:
    """Check the options of ``configure(transport="tcp", ...)``.

    ``trace`` (True, or a file to write at shutdown; None: ``DANAUS_TRACE``)
    is described in `danaus.tracing`, ``admin`` and ``admin_host`` in
    `danaus.transports.tcp.admin`. ``bind_host`` is the address this
    controller listens on (None: ``DANAUS_BIND_HOST``, else loopback).
    ``workers`` are the job's workers (None: ``DANAUS_WORKERS``), attached
    with ``job_key`` (see `danaus.attach_to_workers`). ``host_control``
    gives chaos runs power over the workers' machines and the network between
    them (`danaus.transports.tcp.faults`). ``preload`` names modules the
    fork servers that start the job's procs import before they fork them (None:
    ``DANAUS_PRELOAD``, names separated by commas; see
    `danaus.transports.tcp.forkserver`). ``home_cpus`` (default True) keeps
    each proc's hand-offs between its threads on one CPU of its own, while
    the host has CPUs left (`danaus.core.home_cpu`); False leaves every thread
    to the kernel. ``wait_spin_us`` (default 200) is how long each proc's
    threads poll for what they wait for before they sleep (`danaus.core.awake`);
    0: they sleep at once. The limits
    (``max_message_bytes`` and the rest) are described in
    `danaus.transports.tcp.limits`; None takes them from the environment.
    """
    if heartbeat_interval <= 0 or heartbeat_timeout <= heartbeat_interval:
        raise ValueError("need 0 < heartbeat_interval < heartbeat_timeout")
    if host_control is not None and not isinstance(host_control, HostControl):
        raise TypeError(f"host_control must be a danaus.chaos.HostControl, not {host_control!r}")
    preload_from(preload)
    if not isinstance(home_cpus, bool):
        raise TypeError(f"home_cpus must be True or False, not {home_cpus!r}")
    if not isinstance(wait_spin_us, int) or isinstance(wait_spin_us, bool):
        raise TypeError(f"wait_spin_us must be a whole number of µs, not {wait_spin_us!r}")
    if not 0 <= wait_spin_us <= MAX_WAIT_SPIN_US:
        raise ValueError(f"wait_spin_us must be within 0..{MAX_WAIT_SPIN_US}, not {wait_spin_us}")
    bind_host = bind_host_from(bind_host)
    job_workers = workers_from(workers)
    if job_workers:
        attach_plan(job_workers, job_key, bind_host)
    if not encrypt and not is_loopback(bind_host):
        raise ValueError(
            f"encrypt=False is refused with bind_host={bind_host!r}: whoever can read the "
            "traffic could read the job's password and run code in every process of the job; "
            "it is allowed only on loopback (bind_host='127.0.0.1')"
        )
    Limits.from_options(
        max_message_bytes=max_message_bytes,
        frame_bytes=frame_bytes,
        handshake_timeout=handshake_timeout,
        max_pending_handshakes=max_pending_handshakes,
        max_procs_per_host=max_procs_per_host,
    )


def create_world(**options: Any) -> TcpWorld:
    """The controller's world (``configured`` has checked the options)."""
    return TcpWorld.controller(**options)
