"""ActorMesh, and `Mesh`, what host, proc and actor meshes share.

A mesh object is a reference: it pickles into any message, and code holding it
anywhere can message it. What messaging needs of it is its `Placement`. The
mesh that ``spawn``/``spawn_procs`` returned to its owner, and its slices,
also carry the owner's view of it (`OwnedMesh`), through which they are stopped.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from danaus.core.actor import Actor, EndpointSpec
from danaus.core.context import context
from danaus.core.endpoint import Endpoint, NotAnEndpoint, all_answered
from danaus.core.future import Future
from danaus.core.owned import STOP_TIMEOUT
from danaus.core.placement import Placement
from danaus.core.shape import MeshTrait, Shape
from danaus.core.stopped import Stopped
from danaus.core.suggest import close_names

if TYPE_CHECKING:
    from danaus.core.mesh import ProcMesh
    from danaus.core.owned import OwnedMesh

T = TypeVar("T", bound=Actor)


class Mesh(MeshTrait):
    """What host, proc and actor meshes share: members on procs, a shape, an owner's view."""

    _at: Placement
    _kind = "mesh"

    @property
    def _shape(self) -> Shape:  # type: ignore[override]  # MeshTrait reads it; placed here
        return self._at.shape

    async def __aenter__(self) -> Any:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def stop(self, timeout: float = STOP_TIMEOUT) -> Future[Stopped]:
        """Stop the whole mesh (all of it, even when called on a slice).

        Members take no new messages, finish the queued ones, stop the meshes
        they own, then run ``__cleanup__``; after ``timeout`` seconds the rest are
        abandoned (and procs killed). Stopping is not a failure: members lost
        before or during the stop are skipped, and the future's `Stopped` names
        them.
        """
        runtime = context().actor_instance.runtime
        owned = self._owner_view()
        if not owned.end():
            return runtime.done(Stopped())
        return runtime.submit(owned.stop_members(timeout))

    def _owner_view(self) -> OwnedMesh:
        """The owner's view of this mesh; only the owner's mesh and its slices have one."""
        owned = self._at.owned
        if owned is None:
            raise NotImplementedError(
                f"only the owner of this {self._kind} can stop it; this is a reference to it"
            )
        return owned


class ActorMesh(Mesh, Generic[T]):
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
        owned: OwnedMesh | None = None,
    ) -> None:
        self._at = Placement(mesh_id, name, procs, shape, owned)
        self._endpoints = endpoints
        self._proc_mesh = proc_mesh

    def _with_shape(self, shape: Shape) -> ActorMesh[T]:
        at = self._at
        return ActorMesh(
            at.mesh_id, at.name, self._endpoints, at.procs, shape, self._proc_mesh, at.owned
        )

    def __getattr__(self, name: str) -> Any:
        """The endpoint ``name`` (an `Endpoint`; a `NotAnEndpoint` for a plain method)."""
        if name.startswith("_"):
            raise AttributeError(name)
        spec = self._endpoints.get(name)
        if spec is None:
            public = [n for n in self._endpoints if not n.startswith("_")]
            marked = [n for n in public if not self._endpoints[n].plain]
            hint = close_names(name, public) or f"; its endpoints: {', '.join(marked) or 'none'}"
            raise AttributeError(f"actor mesh {self._at.name!r} has no endpoint {name!r}{hint}")
        return NotAnEndpoint(self._at, spec) if spec.plain else Endpoint(self._at, spec)

    @property
    def name(self) -> str:
        return self._at.name

    @property
    def proc_mesh(self) -> ProcMesh | None:
        return self._proc_mesh

    @property
    def initialized(self) -> Future[None]:
        """Settles when every actor has run ``__init__`` (raises if one failed)."""
        return all_answered(Endpoint(self._at, self._endpoints["__initialized__"]))

    def __repr__(self) -> str:
        return f"<ActorMesh {self._at.name} {self.sizes}>"

    def __reduce__(self) -> tuple[Any, ...]:
        at = self._at
        return (
            ActorMesh,
            (at.mesh_id, at.name, self._endpoints, at.members(), at.shape, self._proc_mesh),
        )


def placement_of(mesh: Mesh) -> Placement:
    """Where the members of ``mesh`` (a mesh or a slice of one) are."""
    return mesh._at


RESERVED = frozenset(name for name in dir(ActorMesh) if not name.startswith("_"))
"""The public names of an actor mesh, which endpoints may not take."""
