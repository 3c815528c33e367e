"""What a data plane is to its proc's transport: the connections that carry core messages.

The control plane (zmq, on the I/O thread) finds peers, carries heartbeats and
losses, and never waits for a data connection. Beside it each transport has
one data plane: tcp's `StreamPlane` (TCP and Unix sockets of its own), ucx's
`SplitPlane` (the stream plane for small messages, UCX for large ones) and
verbs's `VerbsPlane` (RDMA queue pairs). Each delivers what arrives to the
callbacks its transport gave it, in each sender's order.
"""

from __future__ import annotations

from typing import Any, Protocol


class DataPlane(Protocol):
    """The data plane of one proc. `send`, `resolved` and `forget` are thread-safe."""

    address: str
    """Where peers reach this plane (published with the proc's control address)."""

    def start(self) -> None:
        """Begin accepting connections (on the runtime loop's thread, or before it runs)."""

    def send(self, dest: str, message: list[Any]) -> None:
        """Send ``message`` (kind frame first) to ``dest``, in order, without blocking."""

    def resolved(self, dest: str) -> None:
        """``dest``'s address is known now (in the proc's `Peers`): what waited for it goes."""

    def forget(self, dest: str) -> None:
        """``dest`` is lost: drop what is queued for it, and close its connections."""

    async def drain(self, timeout: float) -> None:
        """Give what is queued up to ``timeout`` seconds to go out (before `stop`)."""

    def stop(self) -> None:
        """Send what is left for a moment, then close everything (runtime loop's thread)."""
