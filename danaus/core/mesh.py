"""HostMesh, ProcMesh and ActorMesh: named multidimensional groups of hosts, procs and actors.

A mesh object is a reference: it pickles into any message, and code holding it
anywhere can message it. The mesh that `spawn`/`spawn_procs` returned to its
owner also carries the owner's view of its lifecycle (stopped, failed members,
members replaced by restarts), which slices of it share.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from danaus.core.actor import Actor, EndpointSpec, endpoints_of
from danaus.core.context import context
from danaus.core.endpoint import Endpoint
from danaus.core.errors import MeshStoppedError, SupervisionError
from danaus.core.future import Future
from danaus.core.instance import SpawnOrder
from danaus.core.serialize import dumps
from danaus.core.shape import Extent, MeshTrait, Shape
from danaus.core.supervision import MeshFailure, RestartPolicy
from danaus.transports.base import NumberedNames

if TYPE_CHECKING:
    from danaus.core.instance import Instance
    from danaus.core.runtime import Runtime

T = TypeVar("T", bound=Actor)

STOP_TIMEOUT = 10.0
"""Seconds a graceful stop may take before actors are abandoned and procs killed."""


class _Lifecycle:
    """The owner's view of a mesh it spawned: shared by the mesh and its slices."""

    __slots__ = (
        "children",
        "failed",
        "incarnations",
        "initialized",
        "mesh",
        "name",
        "owner",
        "policy",
        "procs",
        "replacements",
        "spawn",
        "stopped",
    )

    def __init__(self, name: str, initialized: Future[Any] | None = None) -> None:
        self.name = name
        self.stopped = False
        self.initialized = initialized
        self.mesh: Any = None
        self.owner: Instance | None = None
        self.children: list[_Lifecycle] = []
        self.failed: dict[int, MeshFailure] = {}
        self.procs: list[str] | None = None
        self.spawn: SpawnOrder | None = None
        self.policy: RestartPolicy | None = None
        self.replacements: list[ProcMesh] = []
        self.incarnations: dict[int, int] = {}
        """How often each restarted member (by base rank) has been spawned again."""

    def end(self) -> bool:
        """Refuse messages from now on, unwatched and off the owner's list; False if already so."""
        if self.stopped:
            return False
        self.stopped = True
        if self.owner is not None:
            self.owner._runtime.supervisor.release(self.mesh._mesh_id)
            if self.mesh in self.owner.owned:
                self.owner.owned.remove(self.mesh)
        return True


def _caller() -> Instance:
    return context().actor_instance


class _Mesh(MeshTrait):
    """What host, proc and actor meshes share: members on procs, a shape, a lifecycle."""

    _procs: Sequence[str]
    _life: _Lifecycle | None
    _mesh_id: str
    _kind = "mesh"

    def _members(self) -> Sequence[str]:
        """The procs of the members, by position in the base list (after any restarts)."""
        if self._life is not None and self._life.procs is not None:
            return self._life.procs
        return self._procs

    def _targets(self) -> list[tuple[str, int]]:
        procs = self._members()
        return [(procs[rank], index) for index, rank in enumerate(self._shape.ranks())]

    def _check_usable(self) -> None:
        life = self._life
        if life is None:
            return
        if life.stopped:
            raise MeshStoppedError(f"{self._kind} {life.name!r} has been stopped")
        if life.failed:
            for rank in self._shape.ranks():
                failure = life.failed.get(rank)
                if failure is not None:
                    raise SupervisionError(
                        f"{self._kind} {life.name!r} has failed: {failure}", failure
                    )

    async def __aenter__(self) -> Any:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def stop(self, timeout: float = STOP_TIMEOUT) -> Future[None]:
        """Stop the whole mesh (all of it, even when called on a slice).

        Members take no new messages, finish the queued ones, stop the meshes
        they own, then run ``__cleanup__``; after ``timeout`` seconds the rest are
        abandoned (and procs killed). Stopping is not a failure.
        """
        owner = _caller()
        if not self._stopping():
            return owner._runtime.done()
        assert self._life is not None
        return owner._runtime.submit(self._life.mesh._stop_members(timeout))

    async def _stop_as_owner(self) -> None:
        if self._stopping():
            await self._stop_members(STOP_TIMEOUT)

    async def _stop_members(self, timeout: float) -> None:
        raise NotImplementedError

    def _own(self, owner: Instance) -> Any:
        assert self._life is not None
        self._life.mesh = self
        self._life.owner = owner
        owner.owned.append(self)
        return self

    def _stopping(self) -> bool:
        """Mark stopped; False if it already was. Only the owner's mesh can be stopped."""
        if self._life is None:
            raise NotImplementedError(
                f"only the owner of this {self._kind} can stop it; this is a reference to it"
            )
        return self._life.end()


class HostMesh(_Mesh):
    """Hosts, each with an agent that starts procs on it."""

    _kind = "host mesh"
    _mesh_id = "hosts"

    def __init__(self, agents: Sequence[str], shape: Shape) -> None:
        self._procs = agents
        self._shape = shape
        self._life = None

    @classmethod
    def single(cls, agent: str) -> HostMesh:
        return cls((agent,), Shape.unity())

    def _with_shape(self, shape: Shape) -> HostMesh:
        return HostMesh(self._procs, shape)

    def _agents(self) -> ActorMesh[Any]:
        from danaus.core.agents import HOST_AGENT, HostAgent

        return ActorMesh(HOST_AGENT, "hosts", endpoints_of(HostAgent), self._procs, self._shape)

    def spawn_procs(
        self,
        per_host: dict[str, int] | None = None,
        bootstrap: Any = None,
        name: str | None = None,
    ) -> ProcMesh:
        """Start ``per_host`` procs on every host: a proc mesh of host dims plus ``per_host`` dims.

        Returns at once; messages to the procs wait until they are up. The mesh's
        ``initialized`` future settles when every proc has started.
        """
        if bootstrap is not None:
            raise NotImplementedError("custom bootstrap is not supported")
        extent = Extent.from_dict(per_host or {})
        overlap = set(extent.labels) & set(self._shape.labels)
        if overlap:
            raise ValueError(f"per_host dimensions {sorted(overlap)} are already host dimensions")
        owner = _caller()
        mesh_id = owner._runtime.new_id()
        name = name or "procs"
        count = extent.nelements
        shape = Shape.from_extent(
            Extent(self._shape.labels + extent.labels, self._shape.ndslice.sizes + extent.sizes)
        )
        started = self._agents().spawn_procs._fold((mesh_id, count, name), {}, None, _ignore)
        procs = NumberedNames(f"{mesh_id}.", len(self) * count)
        mesh = ProcMesh(mesh_id, procs, shape, self, _Lifecycle(name, started))
        return mesh._own(owner)

    def stop(self, timeout: float = STOP_TIMEOUT) -> Future[None]:
        """Stop every proc mesh the caller spawned on these hosts."""
        owner = _caller()
        hosts = set(self._procs)
        mine = [
            m for m in owner.owned if isinstance(m, ProcMesh) and set(m._host_mesh._procs) & hosts
        ]

        async def stop_all() -> None:
            for mesh in reversed(mine):
                if mesh._stopping():
                    await mesh._stop_members(timeout)

        return owner._runtime.submit(stop_all())

    def __repr__(self) -> str:
        return f"<HostMesh {self.sizes}>"

    def __reduce__(self) -> tuple[Any, ...]:
        return (HostMesh, (self._procs, self._shape))


class ProcMesh(_Mesh):
    """Procs (OS processes, or simulated ones) on which actors are spawned."""

    _kind = "proc mesh"

    def __init__(
        self,
        mesh_id: str,
        procs: Sequence[str],
        shape: Shape,
        host_mesh: HostMesh,
        life: _Lifecycle | None = None,
    ) -> None:
        self._mesh_id = mesh_id
        self._procs = procs
        self._shape = shape
        self._host_mesh = host_mesh
        self._life = life

    @classmethod
    def single(cls, proc: str, host_mesh: HostMesh) -> ProcMesh:
        return cls(proc, (proc,), Shape.unity(), host_mesh)

    def _with_shape(self, shape: Shape) -> ProcMesh:
        return ProcMesh(self._mesh_id, self._procs, shape, self._host_mesh, self._life)

    @property
    def host_mesh(self) -> HostMesh:
        return self._host_mesh

    @property
    def initialized(self) -> Future[Any]:
        """Settles when every proc has started."""
        if self._life is not None and self._life.initialized is not None:
            return self._life.initialized
        return _proc_agents(self).ping._fold((), {}, None, _ignore)

    def host_of(self, base: int) -> HostMesh:
        """The host of the member at position ``base`` of the proc list, as a mesh of one.

        The list holds the procs of each host of ``host_mesh`` in turn, as many on each.
        """
        hosts = self._host_mesh
        per_host = len(self._procs) // len(hosts)
        return HostMesh.single(hosts._procs[hosts._shape.ranks()[base // per_host]])

    def spawn(
        self,
        name: str,
        cls: type[T],
        *args: Any,
        restart: RestartPolicy | None = None,
        **kwargs: Any,
    ) -> ActorMesh[T]:
        """Spawn one ``cls(*args, **kwargs)`` actor on every proc of this mesh.

        Returns at once; ``__init__`` runs on each proc before the actor's first
        message. Arguments are checked against ``cls.__init__`` here. With
        ``restart``, failed members are restarted by the owner (see
        `RestartPolicy`); the keyword is therefore not passed to ``__init__``.
        """
        self._check_usable()
        if not (isinstance(cls, type) and issubclass(cls, Actor)):
            raise TypeError(f"spawn needs a subclass of danaus.Actor, got {cls!r}")
        if restart is not None and not isinstance(restart, RestartPolicy):
            raise TypeError(f"restart must be a danaus.RestartPolicy, not {restart!r}")
        endpoints = endpoints_of(cls)
        clashes = sorted(set(endpoints) & _RESERVED)
        if clashes:
            raise ValueError(
                f"{cls.__qualname__} endpoints {clashes} clash with ActorMesh attributes"
            )
        try:
            inspect.signature(cls).bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"{cls.__qualname__}(): {exc}") from None
        owner = _caller()
        runtime = owner._runtime
        mesh_id = runtime.new_id()
        order = SpawnOrder(
            mesh_id,
            name,
            dumps((cls, args, kwargs), f"an argument of {cls.__qualname__}()"),
            owner.actor_id,
            (runtime.proc_id, owner.key),
            self,
        )
        life = _Lifecycle(name)
        life.spawn = order
        life.policy = restart
        mesh: ActorMesh[T] = ActorMesh(
            mesh_id, name, endpoints, self._members(), self._shape, self, life
        )
        if self._life is not None:
            self._life.children.append(life)
        mesh._own(owner)
        runtime.supervisor.adopt(owner, mesh)
        _proc_agents(self).spawn.broadcast(order)
        return mesh

    async def _stop_members(self, timeout: float) -> None:
        """Stop every actor on these procs (children first), then end the procs."""
        assert self._life is not None
        for child in self._life.children:
            child.end()
        with contextlib.suppress(SupervisionError):
            await _proc_agents(self).stop_all.call(timeout)
        await self._host_mesh._agents().stop_procs.call(self._mesh_id, timeout)
        for replacement in self._life.replacements:
            await replacement._stop_as_owner()

    def __repr__(self) -> str:
        return f"<ProcMesh {self._mesh_id} {self.sizes}>"

    def __reduce__(self) -> tuple[Any, ...]:
        return (ProcMesh, (self._mesh_id, self._members(), self._shape, self._host_mesh))


class ActorMesh(_Mesh, Generic[T]):
    """Actors, one per proc of the proc mesh they were spawned on. Endpoints are attributes."""

    _kind = "actor mesh"

    def __init__(
        self,
        mesh_id: str,
        name: str,
        endpoints: dict[str, EndpointSpec],
        procs: Sequence[str],
        shape: Shape,
        proc_mesh: ProcMesh | None = None,
        life: _Lifecycle | None = None,
    ) -> None:
        self._mesh_id = mesh_id
        self._name = name
        self._endpoints = endpoints
        self._procs = procs
        self._shape = shape
        self._proc_mesh = proc_mesh
        self._life = life

    def _with_shape(self, shape: Shape) -> ActorMesh[T]:
        return ActorMesh(
            self._mesh_id,
            self._name,
            self._endpoints,
            self._procs,
            shape,
            self._proc_mesh,
            self._life,
        )

    def __getattr__(self, name: str) -> Endpoint[Any]:
        if name.startswith("_"):
            raise AttributeError(name)
        spec = self._endpoints.get(name)
        if spec is None:
            raise AttributeError(f"actor mesh {self._name!r} has no endpoint {name!r}")
        return Endpoint(self, spec)

    @property
    def name(self) -> str:
        return self._name

    @property
    def proc_mesh(self) -> ProcMesh | None:
        return self._proc_mesh

    @property
    def initialized(self) -> Future[None]:
        """Settles when every actor has run ``__init__`` (raises if one failed)."""
        return Endpoint(self, self._endpoints["__initialized__"])._fold((), {}, None, _ignore)

    async def _stop_members(self, timeout: float) -> None:
        """No new messages; queued ones finish; owned meshes stop; then ``__cleanup__``."""
        with contextlib.suppress(SupervisionError):
            await _proc_agents(self).stop_actor.call(self._mesh_id, timeout)

    async def _stop_ranks(self, bases: list[int]) -> None:
        """Stop the members at these positions of the base list (for a one_for_all restart)."""
        procs = self._members()
        for base in bases:
            with contextlib.suppress(SupervisionError):
                await agent_of(procs[base]).stop_actor.call(self._mesh_id, STOP_TIMEOUT)

    async def _respawn(self, bases: list[int], runtime: Runtime) -> None:
        """Spawn the members at these positions again; those whose proc died get a new proc.

        Restarts of other members may run meanwhile: the member list is read again
        after the new procs are up, and only these positions change.
        """
        life = self._life
        assert life is not None and life.spawn is not None and self._proc_mesh is not None
        moved = {}
        for base in bases:
            if runtime.is_lost(self._members()[base]):
                moved[base] = await self._replacement_proc(base)
        procs = list(self._members())
        for base, proc in moved.items():
            procs[base] = proc
        life.procs = procs
        incarnation = max(life.incarnations.values(), default=0) + 1
        for index, base in enumerate(self._shape.ranks()):
            if base in bases:
                life.incarnations[base] = incarnation
                order = replace(life.spawn, rank=self._shape.point(index), incarnation=incarnation)
                agent_of(procs[base]).spawn.broadcast(order)

    async def _replacement_proc(self, base: int) -> str:
        """A new proc on the dead one's host, owned by the caller; it stops with the old mesh."""
        proc_mesh = self._proc_mesh
        assert proc_mesh is not None
        replacement = proc_mesh.host_of(base).spawn_procs(name=self._name)
        if proc_mesh._life is not None:
            proc_mesh._life.replacements.append(replacement)
        await replacement.initialized
        return replacement._members()[0]

    def __repr__(self) -> str:
        return f"<ActorMesh {self._name} {self.sizes}>"

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            ActorMesh,
            (
                self._mesh_id,
                self._name,
                self._endpoints,
                self._members(),
                self._shape,
                self._proc_mesh,
            ),
        )


def _ignore(acc: None, value: Any) -> None:
    return None


def _proc_agents(mesh: _Mesh) -> ActorMesh[Any]:
    """The proc agents of the procs under ``mesh``, shaped like it."""
    from danaus.core.agents import PROC_AGENT, ProcAgent

    return ActorMesh(PROC_AGENT, "agents", endpoints_of(ProcAgent), mesh._members(), mesh._shape)


def agent_of(proc: str) -> ActorMesh[Any]:
    """The agent of one proc."""
    from danaus.core.agents import PROC_AGENT, ProcAgent

    return ActorMesh(PROC_AGENT, "agents", endpoints_of(ProcAgent), (proc,), Shape.unity())


_RESERVED = frozenset(name for name in dir(ActorMesh) if not name.startswith("_"))


def this_host() -> HostMesh:
    """The host the calling code runs on, as a host mesh of one."""
    return context().actor_instance.host_mesh


def this_proc() -> ProcMesh:
    """The proc the calling code runs on, as a proc mesh of one."""
    return context().actor_instance.proc


def hosts() -> HostMesh:
    """Every host of the world (cluster or simulation), as a host mesh with dimension ``hosts``."""
    from danaus.core.config import current_world

    agents = current_world().hosts()
    return HostMesh(agents, Shape.from_extent(Extent(["hosts"], [len(agents)])))
