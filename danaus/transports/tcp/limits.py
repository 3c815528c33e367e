"""What a proc lets a peer make it allocate or wait for: the limits of the real transports.

Before a peer has proved that it belongs to the job it is a stranger, and a
stranger may make a proc hold at most ``frame_bytes`` per connection, for at
most ``handshake_timeout`` seconds; on ucx at most ``max_pending_handshakes``
strangers are heard at once. After it has proved itself, a message's payload
may hold at most ``max_message_bytes`` (its envelope and the transport's framing
may add `ENVELOPE_ROOM`), checked before anything is allocated for it: a larger
message is refused, and its sender told. Senders check the same limit before
they send (`danaus.core.runtime.Runtime.check_size`). A host runs at most
``max_procs_per_host`` procs of a job at once, whichever requests started them,
and no more than its memory holds (`danaus.transports.tcp.budget`).

Each limit is a ``configure(transport="tcp"/"ucx", ...)`` option, else the
environment variable named in `ENVIRONMENT`, else its default. Workers get the
controller's limits in their bootstrap.
"""

from __future__ import annotations

import math
import os
from typing import Any

import msgspec

from danaus.core import wire

MiB = 1024 * 1024

ENVIRONMENT = {
    "max_message_bytes": "DANAUS_MAX_MESSAGE_BYTES",
    "frame_bytes": "DANAUS_FRAME_BYTES",
    "handshake_timeout": "DANAUS_HANDSHAKE_TIMEOUT",
    "max_pending_handshakes": "DANAUS_MAX_PENDING_HANDSHAKES",
    "max_procs_per_host": "DANAUS_MAX_PROCS_PER_HOST",
}
"""The environment variable that sets each limit when ``configure`` does not."""

MIN_FRAME_BYTES = 64 * 1024
"""Below this, a handshake or an RDMA header might not fit in one frame."""

FRAME_OVERHEAD = 1024
"""Room left in each frame for what wraps its bytes (CURVE adds 33 bytes to each)."""

ENVELOPE_ROOM = wire.MAX_HEADER_BYTES + 1024
"""Bytes a message may hold beyond its payload: its envelope (at most `wire.MAX_HEADER_BYTES`),
and what a transport adds to it (a kind frame, a sequence number)."""


class Limits(msgspec.Struct, frozen=True):
    """The limits of one job (the same in every proc of it)."""

    max_message_bytes: int = 4096 * MiB
    """Largest payload of a message (pickled arguments, answer or value) a proc sends, or
    accepts from a member of the job."""
    frame_bytes: int = 4 * MiB
    """Largest zmq frame a proc reads, before authentication too; larger buffers go in chunks."""
    handshake_timeout: float = 5.0
    """Seconds a connection may take to prove it belongs to the job."""
    max_pending_handshakes: int = 64
    """Connections (ucx) that may be proving themselves at once; more are refused."""
    max_procs_per_host: int = 1024
    """Most procs of the job that each host runs at once (its memory may allow fewer)."""

    @property
    def message_bytes(self) -> int:
        """The most bytes of one message, all its frames together, a proc reads."""
        return self.max_message_bytes + ENVELOPE_ROOM

    @property
    def message_limit(self) -> str:
        """The limit on a message, as a refusal names it."""
        return (
            f"more than the job's max_message_bytes, {self.max_message_bytes}, "
            f"and {ENVELOPE_ROOM} for its envelope"
        )

    @property
    def chunk_bytes(self) -> int:
        """Bytes of a large buffer that travel in one frame."""
        return self.frame_bytes - FRAME_OVERHEAD

    @classmethod
    def from_options(cls, **options: Any) -> Limits:
        """Limits from ``configure`` options (None: unset), else the environment, else defaults.

        Raises ``ValueError`` (naming the option or variable) for a bad value.
        """
        values: dict[str, Any] = {}
        for name, variable in ENVIRONMENT.items():
            value = options.get(name)
            source = name
            if value is None and variable in os.environ:
                value, source = os.environ[variable], variable
            if value is not None:
                values[name] = _parse(name, source, value)
        limits = cls(**values)
        if limits.frame_bytes > limits.max_message_bytes:
            raise ValueError(
                f"frame_bytes ({limits.frame_bytes}) must not exceed "
                f"max_message_bytes ({limits.max_message_bytes})"
            )
        return limits


def _parse(name: str, source: str, value: Any) -> int | float:
    """``value`` (from option or variable ``source``) as the type of limit ``name``, checked."""
    if isinstance(value, str):
        try:
            value = float(value) if name == "handshake_timeout" else int(value)
        except ValueError:
            raise ValueError(f"{source}={value!r} is not a number") from None
    if name == "handshake_timeout":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"{source} must be a number of seconds, not {value!r}")
        if not (0 < value < math.inf):
            raise ValueError(f"{source} must be a positive, finite number of seconds")
        return float(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{source} must be an int, not {value!r}")
    lowest = MIN_FRAME_BYTES if name == "frame_bytes" else 1
    if value < lowest:
        raise ValueError(f"{source} must be at least {lowest}, not {value}")
    return value
