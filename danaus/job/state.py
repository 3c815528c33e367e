"""What `Job.state` returns: the job's host meshes, as attributes named after them."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from danaus.core.mesh import HostMesh


class JobState:
    """A job's host meshes by name: ``state.trainers`` is the ``trainers`` mesh.

    Each is a `HostMesh` of that mesh's hosts with one dimension, ``hosts``.
    Asking for a mesh the job does not have raises ``AttributeError`` naming
    the ones it has.
    """

    def __init__(self, meshes: Mapping[str, HostMesh]) -> None:
        self._meshes = dict(meshes)

    def __getattr__(self, name: str) -> HostMesh:
        meshes = self.__dict__.get("_meshes", {})
        if name in meshes:
            return meshes[name]
        raise AttributeError(f"the job has no mesh {name!r}; its meshes are {sorted(meshes)}")

    def __getitem__(self, name: str) -> HostMesh:
        try:
            return self._meshes[name]
        except KeyError:
            raise KeyError(
                f"the job has no mesh {name!r}; its meshes are {sorted(self._meshes)}"
            ) from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._meshes)

    def __repr__(self) -> str:
        sizes = ", ".join(f"{name}={len(mesh)}" for name, mesh in self._meshes.items())
        return f"JobState({sizes})"
