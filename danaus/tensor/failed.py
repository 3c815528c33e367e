"""`Failed`: what a worker's table holds for a tensor whose operation failed, or depends on one."""

from __future__ import annotations

from danaus.tensor.errors import RemoteTensorError


class Failed:
    """In a worker's table, a tensor whose operation failed (or depends on one that did)."""

    __slots__ = ("error",)

    def __init__(self, error: RemoteTensorError) -> None:
        self.error = error


class Poisoned(Exception):
    """A command read a `Failed` tensor."""

    def __init__(self, failed: Failed) -> None:
        self.failed = failed
