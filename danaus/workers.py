"""Workers: what a job system starts on each host, for a controller to attach to.

A job system (a script over ssh, SLURM, Kubernetes...) starts one worker per
host with ``danaus worker --listen ADDRESS`` (or `run_worker_loop_forever`)
and gives it the job's key; it gives the controller the workers' addresses
and the same key, and the controller calls `danaus.attach_to_workers`. The
key reaches both by a file only the user can read or an environment variable
the scheduler sets, never a command line; ``danaus key`` makes one.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
from pathlib import Path

from danaus.core import config
from danaus.core.attach import CA, Key, key_of
from danaus.core.bootstrap import BootstrapCommand
from danaus.transports.tcp import hostlink, jobkey
from danaus.transports.tcp.launcher import default_command
from danaus.transports.tcp.worker_loop import run_worker_loop

__all__ = ["default_bootstrap_cmd", "make_job_key", "run_worker_loop_forever"]


def run_worker_loop_forever(
    *,
    address: str,
    key: Key = None,
    ca: CA | None = None,
    name: str | None = None,
    exit_on_disconnect: bool = False,
    address_file: str | os.PathLike[str] | None = None,
) -> None:
    """Serve as this host's worker: wait for a controller, run its procs, wait for the next.

    ``address`` is where to listen: ``tcp://IP:PORT``, ``IP:PORT`` or a host
    name of this host (port 26600 by default). It must name one interface: a
    wildcard such as ``0.0.0.0`` is refused, so a worker never listens on every
    interface by accident. ``key`` is the job's key (its text, or the path of a
    file holding it; None: ``DANAUS_JOB_KEY`` or ``DANAUS_JOB_KEY_FILE``);
    Monarch's ``ca="trust_all_connections"`` is accepted in its place
    (`danaus.core.attach.key_of`). ``name`` names this host in reports and
    output (default: its host name).

    Only a controller holding the job's key can attach, one at a time. When it
    releases the worker or goes silent, every proc it started here is killed,
    and the worker waits for the next controller, or returns if
    ``exit_on_disconnect``. ``address_file`` receives the address it listens on
    once it listens (for a job system that waits for its workers, and for
    port 0, which picks a free port). A final release (``HostMesh.shutdown()``), SIGTERM
    or SIGINT end it.
    """
    ip, port = hostlink.parse_address(address)
    if hostlink.is_wildcard(ip):
        raise ValueError(
            f"{address!r} would listen on every interface of this host; name the address "
            "of the one the job's controller reaches it on"
        )
    settings = config.settings()
    keys = jobkey.resolve(key_of(key, ca), settings)
    if not logging.getLogger().handlers:
        logging.basicConfig(
            stream=sys.stderr,
            level=settings.log_level,
            format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        )
    run_worker_loop(
        ip,
        port,
        keys,
        name=name or socket.gethostname(),
        exit_on_disconnect=exit_on_disconnect,
        address_file=Path(address_file) if address_file is not None else None,
    )


def default_bootstrap_cmd() -> BootstrapCommand:
    """How a proc is started by default; a base for commands of one's own (``with_env``)."""
    return default_command()


def make_job_key(path: str | os.PathLike[str] | None = None) -> str:
    """A new job key; written to a new file at ``path`` (readable by its owner only), if given."""
    return jobkey.write(path) if path is not None else jobkey.generate()
