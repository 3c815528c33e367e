"""What a proc is told to host one member of an actor mesh, and the id that member gets."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from danaus.core.creators import Creator
from danaus.core.serialize import Buffer
from danaus.core.shape import Point

if TYPE_CHECKING:
    from danaus.core.mesh import ProcMesh


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
