"""What a worker process is told when it starts, through its stdin."""

from __future__ import annotations

import sys
from collections.abc import Sequence

import msgspec

from danaus.core.awake import WAIT_SPIN_US
from danaus.core.casting import DEFAULT_FANOUT


def search_path() -> list[str]:
    """This process's ``sys.path`` as the processes it starts are given it (empty entries,
    which mean the working directory, left out: they get that directory apart)."""
    return [p for p in sys.path if p]


def join_search_path(path: Sequence[str]) -> None:
    """Put the entries of ``path`` that ``sys.path`` lacks in front of it."""
    sys.path[:0] = _missing(path)


def joined_search_path(path: Sequence[str]) -> list[str]:
    """`search_path` as it will be once ``path`` is joined to ``sys.path`` (`join_search_path`)."""
    return [p for p in [*_missing(path), *sys.path] if p]


def _missing(path: Sequence[str]) -> list[str]:
    return [p for p in path if p not in sys.path]


class Bootstrap(msgspec.Struct, frozen=True):
    """A worker's identity, where its controller is, and the job's key.

    Written to the worker's stdin (never its command line, which ``ps`` shows).
    A worker is a proc, or (``host_agent == proc_id``) the host agent that a
    worker loop starts for the controller attached to it.
    """

    proc_id: str
    name: str
    host: str
    host_agent: str
    controller: str
    public_key: bytes
    secret_key: bytes
    heartbeat_interval: float
    heartbeat_timeout: float
    parent_pid: int
    sys_path: list[str]
    cwd: str
    bind_host: str
    trace: bool = False
    transport: str = "tcp"
    encrypt: bool = True
    limits: dict[str, int | float] = {}
    """The job's `danaus.transports.tcp.limits.Limits`, as a dict."""
    setup: list[bytes] | None = None
    """The pickled function to run before taking messages (``spawn_procs(bootstrap=...)``)."""
    hosts: list[str] = []
    """The host agents of the job's hosts (``danaus.hosts()``); empty: this host alone."""
    remote: bool = False
    """Whether the proc runs on another host than the controller (its output names its host)."""
    cast_fanout: int = DEFAULT_FANOUT
    """The job's ``cast_fanout`` (`danaus.core.casting`)."""
    preload: list[str] = []
    """The job's ``preload``: what a host agent's fork server imports (`forkserver`)."""
    home_cpus: bool = True
    """The job's ``home_cpus``: whether the procs a host agent starts get home CPUs."""
    home_cpu: int | None = None
    """The CPU this proc's runtime loop thread is pinned to (`danaus.core.home_cpu`), if any."""
    wait_spin_us: int = WAIT_SPIN_US
    """The job's ``wait_spin_us``: how long this proc's threads poll before they sleep."""

    @property
    def is_host_agent(self) -> bool:
        return self.host_agent == self.proc_id

    def encode(self) -> bytes:
        return msgspec.msgpack.encode(self)

    @classmethod
    def decode(cls, data: bytes) -> Bootstrap:
        return msgspec.msgpack.decode(data, type=cls)
