"""What a worker process is told when it starts, through its stdin."""

from __future__ import annotations

import sys
from collections.abc import Sequence

import msgspec

from danaus.core.settings import JobOptions


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
    """A worker's identity, where its controller is, the job's key and the job's options.

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
    parent_pid: int
    sys_path: list[str]
    cwd: str
    bind_host: str
    options: JobOptions
    """The job's options: the controller's, the same in every proc of the job."""
    transport: str = "tcp"
    setup: list[bytes] | None = None
    """The pickled function to run before taking messages (``spawn_procs(bootstrap=...)``)."""
    hosts: list[str] = []
    """The host agents of the job's hosts (``danaus.hosts()``); empty: this host alone."""
    remote: bool = False
    """Whether the proc runs on another host than the controller (its output names its host)."""
    home_cpu: int | None = None
    """The CPU this proc's runtime loop thread is pinned to (`danaus.core.home_cpu`), if any."""

    @property
    def is_host_agent(self) -> bool:
        return self.host_agent == self.proc_id

    def encode(self) -> bytes:
        return msgspec.msgpack.encode(self)

    @classmethod
    def decode(cls, data: bytes) -> Bootstrap:
        return msgspec.msgpack.decode(data, type=cls)
