"""Placement: which procs the members of a mesh live on, and in what shape.

Every mesh, and every slice of one, has a placement: it is what messaging the
members (`Endpoint`) and watching them (the owner's `Supervisor`) need of a
mesh. The procs are listed by base rank, the member's position in the mesh as
spawned; a slice keeps the list and narrows the shape. On the mesh its owner
holds, the owner's view (`OwnedMesh`) knows where restarts moved members.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from danaus.core.shape import Shape

if TYPE_CHECKING:
    from danaus.core.owned import OwnedMesh


class Placement:
    """Where the members of a mesh (or a slice of it) are."""

    __slots__ = ("mesh_id", "name", "owned", "procs", "shape")

    def __init__(
        self,
        mesh_id: str,
        name: str,
        procs: Sequence[str],
        shape: Shape,
        owned: OwnedMesh | None = None,
    ) -> None:
        self.mesh_id = mesh_id
        """The mesh's id; an actor mesh's members are hosted under it on their procs."""
        self.name = name
        """The mesh's name, as errors give it."""
        self.procs = procs
        """The members' procs as spawned, by base rank."""
        self.shape = shape
        """Which of them are members of this mesh or slice, and where."""
        self.owned = owned
        """The owner's view, on the owner's mesh and its slices; None on a reference."""

    def sliced(self, shape: Shape, *, owned: bool = True) -> Placement:
        """The same members narrowed to ``shape``; ``owned`` False: a reference to them."""
        return Placement(self.mesh_id, self.name, self.procs, shape, self.owned if owned else None)

    def members(self) -> Sequence[str]:
        """The members' procs by base rank, after any restarts moved some."""
        owned = self.owned
        return owned.members() if owned is not None else self.procs

    def targets(self) -> list[tuple[str, int]]:
        """Each member of this slice: its proc, and its index in the slice."""
        procs = self.members()
        return [(procs[rank], index) for index, rank in enumerate(self.shape.ranks())]

    def check_usable(self, endpoint: str | None = None) -> None:
        """Raise if the owner stopped the mesh, or knows a member of this slice failed."""
        if self.owned is not None:
            self.owned.check_usable(self.shape, endpoint)
