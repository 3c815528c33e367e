"""Who spawned an actor, as its code sees it, and the name that makes of it.

`Instance.creator` is a `Creator`: the spawner's name, class and point, and
its own creator in turn, up to the controller. An actor is named by that
chain, as Monarch names it: ``<root>.<trainers.Trainer trainers{'gpus': 3/8}>``
(`qualified_name`), which is what ``str(context().actor_instance)`` gives and
what log lines made in an actor begin with (`danaus.core.actor_logs`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from danaus.core.shape import Point


class Named(Protocol):
    """What `qualified_name` reads: an `Instance` or a `Creator`."""

    @property
    def name(self) -> str: ...

    @property
    def class_name(self) -> str | None: ...

    @property
    def rank(self) -> Point: ...

    @property
    def creator(self) -> Creator | None: ...


@dataclass(frozen=True)
class Creator:
    """An actor's spawner: picklable, it travels in the order that spawns the actor.

    ``class_name`` is the spawner's class (module and qualified name), None
    for the controller's own code, whose ``name`` is ``root``.
    """

    actor_id: str
    name: str
    class_name: str | None
    rank: Point
    creator: Creator | None = None

    def __str__(self) -> str:
        return qualified_name(self)


def qualified_name(named: Named) -> str:
    """``<root>.<module.Class name{point}>``: ``named`` after its creators, outermost first."""
    parts = []
    current: Named | None = named
    while current is not None:
        cls = f"{current.class_name} " if current.class_name else ""
        point = str(current.rank) if len(current.rank) else ""
        parts.append(f"<{cls}{current.name}{point}>")
        current = current.creator
    return ".".join(reversed(parts))
