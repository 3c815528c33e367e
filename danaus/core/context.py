"""What code running in an actor (or in the controller) can ask about itself."""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar, Token
from typing import TYPE_CHECKING

from danaus.core.shape import Extent, Point

if TYPE_CHECKING:
    from danaus.core.instance import Instance


class Context:
    """The running actor and the position of this message's recipient."""

    __slots__ = ("actor_instance", "message_rank")

    def __init__(self, actor_instance: Instance, message_rank: Point) -> None:
        self.actor_instance = actor_instance
        self.message_rank = message_rank

    def __repr__(self) -> str:
        return f"Context({self.actor_instance.actor_id}, message_rank={self.message_rank})"


NO_MESSAGE = Point(0, Extent((), ()))

_current: ContextVar[Context] = ContextVar("danaus_context")

set_context: Callable[[Context], Token[Context]] = _current.set
"""Make a context current; returns the token that undoes it. The variable's own method,
not a function calling it: an actor sets its context for every message."""

reset_context: Callable[[Token[Context]], None] = _current.reset
"""Undo a `set_context`, given its token."""


def peek_context() -> Context | None:
    """The context set for the running actor, if any (never makes a world)."""
    return _current.get(None)


def context() -> Context:
    """The current actor's context; in controller code, the controller's own."""
    ctx = _current.get(None)
    if ctx is None:
        from danaus.core.config import current_world

        return current_world().root.client.context
    return ctx


def current_rank() -> Point:
    """This message's recipient's position within the slice of the mesh that was messaged."""
    return context().message_rank


def current_actor_name() -> str:
    """The actor id of the running actor (in controller code, the controller's own)."""
    return context().actor_instance.actor_id


def current_size() -> dict[str, int]:
    """Sizes of the slice of the mesh that was messaged."""
    return dict(context().message_rank.extent)
