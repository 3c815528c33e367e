"""What a proc is told to host one member of an actor mesh, the id that member gets, and the
class and arguments it is built from."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from danaus.core.creators import Creator
from danaus.core.serialize import Buffer, loads
from danaus.core.shape import Point

if TYPE_CHECKING:
    from danaus.core.mesh import ProcMesh

Construction = tuple[Any, tuple[Any, ...], dict[str, Any]]
"""An actor's class, and the positional and keyword arguments of its ``__init__``."""


def member_id(mesh_id: str, name: str, index: int, incarnation: int = 0) -> str:
    """The actor id of member ``index`` of a mesh (``~n`` once its owner has restarted it)."""
    suffix = f"~{incarnation}" if incarnation else ""
    return f"{mesh_id}/{name}[{index}]{suffix}"


@dataclass(frozen=True)
class SpawnOrder:
    """Everything a proc needs to host one member of an actor mesh."""

    mesh_id: str
    name: str
    blob: list[Buffer]
    creator: Creator
    owner: tuple[str, str]
    proc_mesh: ProcMesh
    rank: Point | None = None
    """The member's position; None means the receiving agent's position in the cast."""
    incarnation: int = 0
    """How many times the owner has restarted this member (0: the first)."""


def construction(blob: Sequence[Buffer]) -> tuple[Construction, bool]:
    """The class and arguments that ``blob`` (a `SpawnOrder`'s) holds, and whether the members
    of a mesh may share them (nothing in the arguments can change): then, where procs share
    one OS process, they are decoded once for all (`World.decode_shared`)."""
    cls, args, kwargs = loads(blob)
    fixed = _unchangeable(args) and all(_unchangeable(value) for value in kwargs.values())
    return (cls, args, kwargs), fixed


_FIXED = frozenset((int, float, complex, bool, str, bytes, type(None)))


def _unchangeable(value: Any, depth: int = 3) -> bool:
    """Whether nothing in ``value`` can change: a scalar, a class, or a tuple or frozenset of
    such (``depth`` levels), which every member may share."""
    kind = type(value)
    if kind in _FIXED or isinstance(value, type):
        return True
    return (
        depth > 0
        and (kind is tuple or kind is frozenset)
        and all(_unchangeable(item, depth - 1) for item in value)
    )
