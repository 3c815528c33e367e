"""OwnedMesh: what the owner of a mesh knows of it, in one place.

The mesh that ``spawn``/``spawn_procs`` returned, every slice of it, the
owner's actor and the owner's supervisor all share one `OwnedMesh`: whether it
is stopped, which members failed, which procs its members live on after
restarts, its restart budget, and how to restart members.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from danaus.core import trace as ev
from danaus.core.errors import MeshStoppedError, SupervisionError
from danaus.core.stopped import Stopped
from danaus.core.supervision import MeshFailure, RestartBudget, RestartPolicy

if TYPE_CHECKING:
    from danaus.core.future import Future
    from danaus.core.instance import Instance, SpawnOrder
    from danaus.core.mesh import ActorMesh, ProcMesh
    from danaus.core.shape import Shape

log = logging.getLogger("danaus.supervision")

STOP_TIMEOUT = 10.0
"""Seconds a graceful stop may take before actors are abandoned and procs killed."""


class OwnedMesh:
    """The owner's view of one mesh it spawned (a proc mesh or an actor mesh)."""

    def __init__(
        self,
        name: str,
        kind: str,
        owner: Instance,
        *,
        initialized: Future[Any] | None = None,
        spawn: SpawnOrder | None = None,
        policy: RestartPolicy | None = None,
        actor_class: str | None = None,
    ) -> None:
        self.name = name
        self.kind = kind
        self.actor_class = actor_class
        """The members' class, as failure reports name it (actor meshes only)."""
        self.owner = owner
        self.mesh: Any = None
        """The whole mesh as spawned (set when the mesh is made)."""
        self.stopped = False
        self.ended_with_procs = False
        self.initialized = initialized
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
        self.replacements: list[ProcMesh] = []
        """Procs started to replace lost ones; they stop with this mesh."""
        self.incarnations: dict[int, int] = {}
        """How often each restarted member (by base rank) has been spawned again."""

    # ---- state ----------------------------------------------------------------------

    def members(self, spawned: Any) -> Any:
        """The procs of the members, by base rank: after restarts, or ``spawned`` as is."""
        return self.procs if self.procs is not None else spawned

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
        self.owner._runtime.supervisor.release(self.mesh._mesh_id)
        if self in self.owner.owned:
            self.owner.owned.remove(self)
        return True

    async def stop(self, timeout: float = STOP_TIMEOUT) -> Stopped:
        """End the mesh and stop its members (nothing to do if it was already stopped)."""
        if self.end():
            return await self.mesh._stop_members(timeout)
        return Stopped()

    def member_failed(self, base: int, failure: MeshFailure) -> bool:
        """Record a failed member; False if it was already known to have failed."""
        if base in self.failed:
            return False
        self.failed[base] = failure
        failure.mesh = self.mesh
        return True

    def incarnation(self, base: int) -> int:
        return self.incarnations.get(base, 0)

    def restart_delay(self) -> float | None:
        """Seconds before restarting a failed member, or None to escalate instead."""
        if self.budget is None or not self.owner.is_running:
            return None
        runtime = self.owner._runtime
        return self.budget.next_delay(runtime.loop.time(), runtime.world.random)

    # ---- restarting -----------------------------------------------------------------

    async def restart(self, failed: int, delay: float) -> None:
        """After ``delay`` seconds, restart member ``failed`` (every member, for one_for_all)."""
        assert self.budget is not None
        mesh: ActorMesh[Any] = self.mesh
        await asyncio.sleep(delay)
        if self.stopped or not self.owner.is_running:
            return
        self.owner.enter()
        if self.budget.policy.strategy == "one_for_all":
            bases = mesh._shape.ranks()
            await self._stop_members([b for b in bases if b not in self.failed])
        else:
            bases = [failed]
        self.restarting = False
        try:
            await self._respawn(bases)
        except Exception as exc:
            log.error("restarting mesh %r failed: %r", self.name, exc)
            self.owner.supervise(self.failed[failed])
            return
        for base in bases:
            self.failed.pop(base, None)
        runtime = self.owner._runtime
        runtime.supervisor.watch_members(self)
        ranks = [i for i, base in enumerate(mesh._shape.ranks()) if base in bases]
        runtime.trace.record(ev.Restart(proc=runtime.proc_id, mesh=mesh._mesh_id, ranks=ranks))

    async def _stop_members(self, bases: list[int]) -> None:
        """Stop the members at these base ranks (the survivors, before a one_for_all restart)."""
        from danaus.core.mesh import agent_of

        procs = self.members(self.mesh._procs)
        for base in bases:
            with contextlib.suppress(SupervisionError):
                await agent_of(procs[base]).stop_actor.call(self.mesh._mesh_id, STOP_TIMEOUT)

    async def _respawn(self, bases: list[int]) -> None:
        """Spawn the members at these base ranks again; those whose proc died get a new proc.

        Restarts of other members may run meanwhile: the member list is read again
        after the new procs are up, and only these positions change.
        """
        from danaus.core.mesh import agent_of

        assert self.spawn is not None
        mesh: ActorMesh[Any] = self.mesh
        runtime = self.owner._runtime
        moved = {}
        for base in bases:
            if runtime.is_lost(self.members(mesh._procs)[base]):
                moved[base] = await self._replacement_proc(base)
        procs = list(self.members(mesh._procs))
        for base, proc in moved.items():
            procs[base] = proc
        self.procs = procs
        incarnation = max(self.incarnations.values(), default=0) + 1
        for index, base in enumerate(mesh._shape.ranks()):
            if base in bases:
                self.incarnations[base] = incarnation
                order = replace(self.spawn, rank=mesh._shape.point(index), incarnation=incarnation)
                agent_of(procs[base]).spawn.broadcast(order)

    async def _replacement_proc(self, base: int) -> str:
        """A new proc on the dead one's host, owned by the caller; it stops with the old mesh."""
        proc_mesh: ProcMesh = self.mesh.proc_mesh
        replacement = proc_mesh.host_of(base).spawn_procs(name=self.name)
        if proc_mesh._owned is not None:
            proc_mesh._owned.replacements.append(replacement)
        await replacement.initialized
        return replacement._members()[0]
