"""Where an engine's commands go: the tensor workers of a proc mesh (`Workers`).

The engine records commands and cuts batches; a delivery carries them. The
one real delivery is a mesh of `TensorWorker` s, one per proc; a
`danaus.tensor.simulator.Simulator` mesh has one of its own, which times the
commands instead of running them.
"""

from __future__ import annotations

import contextlib
import pickle
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from danaus.core.actor_mesh import placement_of
from danaus.core.errors import SupervisionError
from danaus.tensor.transfers import member
from danaus.tensor.worker import TensorWorker

if TYPE_CHECKING:
    from danaus.core.actor_mesh import ActorMesh
    from danaus.core.mesh import ProcMesh
    from danaus.core.shape import Shape

Segments = Sequence[tuple[int, Sequence[tuple[Any, ...]]]]

WORKERS = "tensor_engine"
"""The name of the mesh of tensor workers on a proc mesh."""


class Delivery:
    """What carries an engine's batches to the procs of a mesh."""

    def check(self, shape: Shape) -> None:
        """Raise `SupervisionError` if a proc under ``shape`` has failed."""

    def send(self, shape: Shape, batch: int, segments: Segments) -> None:
        """Deliver batch number ``batch`` to the procs under ``shape``, after the previous ones."""
        raise NotImplementedError

    def send_to_live(self, shape: Shape, batch: int, segments: Segments) -> None:
        """`send` to the procs under ``shape`` that live (a batch that frees handles)."""
        raise NotImplementedError

    def setup(self, command: tuple[Any, ...]) -> None:
        """Deliver a definition to every live proc, ahead of the batches that use it."""
        raise NotImplementedError

    @property
    def workers(self) -> ActorMesh[TensorWorker]:
        """The tensor workers themselves (for moving tensors between procs)."""
        raise NotImplementedError


class Workers(Delivery):
    """A `TensorWorker` on every proc of a proc mesh, spawned by the engine's owner."""

    def __init__(self, whole: ProcMesh, seed: int) -> None:
        self._workers: ActorMesh[TensorWorker] = whole.spawn(
            WORKERS, TensorWorker, seed, placement_of(whole).mesh_id
        )

    @property
    def workers(self) -> ActorMesh[TensorWorker]:
        return self._workers

    def check(self, shape: Shape) -> None:
        placement_of(self._workers).sliced(shape).check_usable()

    def send(self, shape: Shape, batch: int, segments: Segments) -> None:
        self.check(shape)
        self._workers._with_shape(shape).run.broadcast(pickle.dumps((batch, segments), protocol=5))

    def send_to_live(self, shape: Shape, batch: int, segments: Segments) -> None:
        payload = pickle.dumps((batch, segments), protocol=5)
        _to_live(self._workers._with_shape(shape), lambda w: w.run.broadcast(payload))

    def setup(self, command: tuple[Any, ...]) -> None:
        _to_live(self._workers, lambda w: w.setup.broadcast(command))


def _to_live(workers: ActorMesh[TensorWorker], send: Callable[[ActorMesh[Any]], None]) -> None:
    """``send(workers)``, or, where some have failed, ``send`` to each live one of them (what
    every worker keeps, or frees: a failed proc's are gone with it)."""
    try:
        send(workers)
    except SupervisionError:
        for rank in placement_of(workers).shape.ranks():
            with contextlib.suppress(SupervisionError):
                send(member(workers, rank))
