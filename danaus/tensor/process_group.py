"""`RemoteProcessGroup`: a torch.distributed process group over some dimensions of a mesh.

``pg = mesh.process_group("dp")`` names, on the controller, the groups of
procs that differ only along ``dp``. Passed to a `danaus.remote` function,
it arrives on each proc as that proc's own ``torch.distributed`` process group
(gloo or NCCL on real transports, a message-based one on the simulator), one
per stream, so that the function can call ``torch.distributed.all_reduce(t,
group=pg)`` and the like.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch.distributed as dist

from danaus.core.actor_mesh import placement_of

if TYPE_CHECKING:
    from danaus.core.mesh import ProcMesh


class RemoteProcessGroup:
    """The process groups of a mesh along ``dims``, as the controller names them."""

    def __init__(self, dims: tuple[str, ...], mesh: ProcMesh) -> None:
        from danaus.tensor.engine import engine_of

        for dim in dims:
            if dim not in placement_of(mesh).shape.labels:
                raise KeyError(f"dimension {dim!r} is not in {mesh!r}")
        self.dims = dims
        self.mesh = mesh
        self.group_id = engine_of(mesh).group_id(mesh, dims)

    def size(self) -> int:
        """How many procs each group has."""
        return self.mesh.size(self.dims)

    def __repr__(self) -> str:
        return f"<RemoteProcessGroup {self.dims} of {self.mesh!r}>"


class MetaGroup(dist.ProcessGroup):
    """Stands for a `RemoteProcessGroup` while a remote function runs on meta tensors: its
    collectives do nothing (the shapes do not change)."""

    def __init__(self, size: int) -> None:
        super().__init__(0, size)

    def allreduce(self, tensors: Any, opts: Any = None) -> _Nothing:
        return _Nothing()

    def allgather(self, output_lists: Any, tensors: Any, opts: Any = None) -> _Nothing:
        return _Nothing()

    def broadcast(self, tensors: Any, opts: Any = None) -> _Nothing:
        return _Nothing()

    def barrier(self, opts: Any = None) -> _Nothing:
        return _Nothing()


class _Nothing:
    def wait(self, timeout: Any = None) -> bool:
        return True

    def is_completed(self) -> bool:
        return True
