"""ValueMesh: one value per member of a mesh, addressed by coordinates."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Generic, TypeVar

from danaus.core.shape import MeshTrait, Point, Shape

R = TypeVar("R")


class ValueMesh(MeshTrait, Generic[R]):
    """The values a `call` gathered, shaped like the mesh that was called.

    ``values`` are given in row-major order of ``shape``. Slicing keeps the values
    of the members that remain.
    """

    def __init__(self, shape: Shape, values: Iterable[R]) -> None:
        values = list(values)
        if len(values) != len(shape):
            raise ValueError(f"{len(values)} values for a shape of {len(shape)} members")
        self._shape = shape
        self._by_rank: Mapping[int, R] = dict(zip(shape.ranks(), values))

    def _with_shape(self, shape: Shape) -> ValueMesh[R]:
        return ValueMesh(shape, [self._by_rank[r] for r in shape.ranks()])

    def item(self, **coords: int) -> R:
        """The value at ``coords``; every dimension must be given."""
        missing = [label for label in self._shape.labels if label not in coords]
        if missing:
            raise KeyError(f"item() needs a coordinate for every dimension; missing {missing}")
        member = self._shape.slice(**coords)
        return self._by_rank[member.ranks()[0]]

    def items(self) -> Iterator[tuple[Point, R]]:
        """``(Point, value)`` pairs in row-major order."""
        for index, rank in enumerate(self._shape.ranks()):
            yield self._shape.point(index), self._by_rank[rank]

    def values(self) -> Iterator[R]:
        """The values in row-major order."""
        for rank in self._shape.ranks():
            yield self._by_rank[rank]

    def get(self, index: int) -> R:
        """The value of the ``index``-th member in row-major order."""
        ranks = self._shape.ranks()
        if not 0 <= index < len(ranks):
            raise IndexError(f"index {index} out of range for {len(ranks)} values")
        return self._by_rank[ranks[index]]

    def __iter__(self) -> Iterator[tuple[Point, R]]:
        return self.items()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ValueMesh):
            return self._shape.extent == other._shape.extent and list(self.values()) == list(
                other.values()
            )
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        body = ", ".join(f"{dict(p)}: {v!r}" for p, v in self.items())
        return f"ValueMesh({self._shape.extent!r}, {{{body}}})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (ValueMesh, (self._shape, list(self.values())))
