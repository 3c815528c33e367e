"""OwnedMesh: what the owner of a mesh knows of it, in one place.

The mesh that ``spawn``/``spawn_procs`` returned, every slice of it, the
owner's actor and the owner's supervisor all share one `OwnedMesh`: whether it
is stopped, which members failed, which procs its members live on after
restarts, and its restart budget. How a failed member is restarted is
`danaus.core.restarts`; how the members of each kind of mesh are stopped is
given by whoever makes the view (`danaus.core.mesh`).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any

from danaus.core.errors import MeshStoppedError, SupervisionError
from danaus.core.placement import Placement
from danaus.core.shape import Shape
from danaus.core.stopped import Stopped
from danaus.core.supervision import MeshFailure, RestartBudget, RestartPolicy

if TYPE_CHECKING:
    from danaus.core.actor_mesh import Mesh
    from danaus.core.future import Future
    from danaus.core.instance import Instance
    from danaus.core.spawn_order import SpawnOrder

STOP_TIMEOUT = 10.0
"""Seconds a graceful stop may take before actors are abandoned and procs killed."""

StopMembers = Callable[["OwnedMesh", float], Coroutine[Any, Any, Stopped]]
"""How the members of one kind of mesh are stopped, given its owner's view and a timeout."""


class OwnedMesh:
    """The owner's view of one mesh it spawned (a host, proc or actor mesh)."""

    def __init__(
        self,
        owner: Instance,
        kind: str,
        stop_members: StopMembers,
        *,
        mesh_id: str,
        name: str,
        procs: Sequence[str],
        shape: Shape,
        initialized: Future[Any] | None = None,
        spawn: SpawnOrder | None = None,
        policy: RestartPolicy | None = None,
        actor_class: str | None = None,
        parent: OwnedMesh | None = None,
    ) -> None:
        self.owner = owner
        self.kind = kind
        self.whole = Placement(mesh_id, name, procs, shape, self)
        """The whole mesh as spawned (its id, name, procs and shape)."""
        self.mesh: Mesh | None = None
        """The mesh object its owner was given (what a `MeshFailure` names as its mesh)."""
        self._stop_members = stop_members
        self.actor_class = actor_class
        """The members' class, as failure reports name it (actor meshes only)."""
        self.stopped = False
        self.ended_with_procs = False
        self.initialized = initialized
        self.parent = parent
        """The view of the proc mesh an actor mesh was spawned on, if the owner spawned it."""
        self.children: list[OwnedMesh] = []
        """Actor meshes spawned on this proc mesh: they end with it."""
        self.failed: dict[int, MeshFailure] = {}
        """Failed members by base rank (position in the member list), until restarted."""
        self.procs: list[str] | None = None
        """The members' procs after restarts moved some of them (None: as spawned)."""
        self.spawn = spawn
        self.budget = RestartBudget(policy) if policy is not None else None
        self.restarting = False
        """A one_for_all restart is under way: further failures are part of it."""
        self.replacements: list[OwnedMesh] = []
        """Procs started to replace lost ones; they stop with this mesh."""
        self.incarnations: dict[int, int] = {}
        """How often each restarted member (by base rank) has been spawned again."""
        if parent is not None:
            parent.children.append(self)

    @property
    def name(self) -> str:
        return self.whole.name

    def members(self) -> Sequence[str]:
        """The procs of the members, by base rank: after restarts, or as spawned."""
        return self.procs if self.procs is not None else self.whole.procs

    def check_usable(self, shape: Shape, endpoint: str | None = None) -> None:
        """Raise if the mesh is stopped, or if a member under ``shape`` has failed.

        ``endpoint`` is the endpoint being called, which the error then names
        first (``Endpoint call mesh.endpoint() failed, ...``), as Monarch's do.
        """
        if self.stopped:
            raise MeshStoppedError(self._lead(endpoint) + self._stopped())
        for rank in shape.ranks() if self.failed else ():
            failure = self.failed.get(rank)
            if failure is not None:
                raise SupervisionError(self._lead(endpoint) + failure.report(), failure)

    def _lead(self, endpoint: str | None) -> str:
        return f"Endpoint call {self.name}.{endpoint}() failed, " if endpoint else ""

    def _stopped(self) -> str:
        """Why the mesh takes no messages, in the words Monarch's errors use."""
        if self.ended_with_procs:
            return f"{self.kind} is stopped due to proc mesh shutdown ({self.name!r})"
        if self.spawn is not None:  # an actor mesh, stopped by its owner
            return f"The actor mesh {self.name!r} has status: stopped"
        kind = "".join(word.capitalize() for word in self.kind.split())
        return f"`{kind}` has already been stopped ({self.name!r})"

    def end(self, with_procs: bool = False) -> bool:
        """Refuse messages from now on, unwatched and off the owner's list; False if already so.

        ``with_procs``: the mesh ends because its proc mesh is stopping.
        """
        if self.stopped:
            return False
        self.stopped = True
        self.ended_with_procs = with_procs
        self.owner.runtime.supervisor.release(self.whole.mesh_id)
        if self in self.owner.owned:
            self.owner.owned.remove(self)
        return True

    async def stop(self, timeout: float = STOP_TIMEOUT) -> Stopped:
        """End the mesh and stop its members (nothing to do if it was already stopped)."""
        if self.end():
            return await self.stop_members(timeout)
        return Stopped()

    def stop_members(self, timeout: float) -> Coroutine[Any, Any, Stopped]:
        """Stop the members of the mesh, which `end` has ended."""
        return self._stop_members(self, timeout)

    def member_failed(self, base: int, failure: MeshFailure) -> bool:
        """Record a failed member; False if it was already known to have failed."""
        if base in self.failed:
            return False
        self.failed[base] = failure
        failure.mesh = self.mesh  # type: ignore[assignment]  # only actor meshes are watched
        return True

    def incarnation(self, base: int) -> int:
        return self.incarnations.get(base, 0)

    def restart_delay(self) -> float | None:
        """Seconds before restarting a failed member, or None to escalate instead."""
        if self.budget is None or not self.owner.is_running:
            return None
        runtime = self.owner.runtime
        return self.budget.next_delay(runtime.loop.time(), runtime.world.random)
