"""Undeliverable messages: what the sender of a message that could not be delivered is told."""

from __future__ import annotations

from typing import Any


class UndeliverableMessageEnvelope:
    """A message that could not be delivered, as its sender's ``_handle_undeliverable_message``
    receives it. The methods are those of Monarch's class of the same name."""

    __slots__ = ("_dest", "_error", "_sender")

    def __init__(self, sender: str, dest: str, error: str) -> None:
        self._sender = sender
        self._dest = dest
        self._error = error

    def sender(self) -> str:
        """The actor id of the sender."""
        return self._sender

    def dest(self) -> str:
        """Where it was going: an actor's endpoint (``proc/mesh.endpoint``) or a port
        (``proc:port``)."""
        return self._dest

    def error_msg(self) -> str:
        """Why it could not be delivered."""
        return self._error

    def __repr__(self) -> str:
        return (
            f"UndeliverableMessageEnvelope(sender={self._sender}, dest={self._dest}: {self._error})"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (UndeliverableMessageEnvelope, (self._sender, self._dest, self._error))


def undelivered(message: UndeliverableMessageEnvelope) -> str:
    """Why the sender of ``message`` fails when nothing handles its return."""
    return f"a message it sent to {message.dest()} could not be delivered: {message.error_msg()}"
