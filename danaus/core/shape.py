"""Named multidimensional shapes: the geometry every mesh and ValueMesh shares.

A mesh's members live in a flat list (procs of a proc mesh, for example). A
`Shape` names a strided view into that list: labels for its dimensions and a
`Slice` (offset, sizes, strides) mapping each coordinate to a position in the
list. Slicing, splitting, flattening and renaming make new shapes over the same
list, so a sliced mesh still knows where each of its members lives.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, TypeVar


def _check_label(label: str) -> None:
    if not isinstance(label, str) or not label.isidentifier():
        raise ValueError(f"dimension label must be an identifier, got {label!r}")


class Extent(Mapping[str, int]):
    """Sizes of named dimensions, in order: ``Extent(["hosts", "gpus"], [2, 8])``."""

    __slots__ = ("_labels", "_nelements", "_sizes")

    def __init__(self, labels: Sequence[str], sizes: Sequence[int]) -> None:
        labels, sizes = tuple(labels), tuple(sizes)
        if len(labels) != len(sizes):
            raise ValueError(f"{len(labels)} labels but {len(sizes)} sizes")
        if len(set(labels)) != len(labels):
            raise ValueError(f"dimension labels must be unique, got {labels}")
        for label, size in zip(labels, sizes):
            _check_label(label)
            if not isinstance(size, int) or isinstance(size, bool):
                raise TypeError(
                    f"size of dimension {label!r} must be an int, got {type(size).__name__} "
                    f"{size!r}"
                )
            if size < 1:
                raise ValueError(f"size of dimension {label!r} must be positive, got {size}")
        self._labels = labels
        self._sizes = sizes
        self._nelements = math.prod(sizes)

    @classmethod
    @functools.lru_cache(maxsize=4096)
    def of(cls, labels: tuple[str, ...], sizes: tuple[int, ...]) -> Extent:
        """A shared, validated Extent: for the hot path, where the same extents recur."""
        return cls(labels, sizes)

    @classmethod
    def from_dict(cls, sizes: Mapping[str, int]) -> Extent:
        """An extent from ``{label: size}``; a `TypeError` if ``sizes`` is not a mapping."""
        if not isinstance(sizes, Mapping):
            raise TypeError(
                f"dimensions must be a dict of label to size, got {type(sizes).__name__} {sizes!r}"
            )
        return cls(list(sizes), list(sizes.values()))

    @property
    def labels(self) -> tuple[str, ...]:
        return self._labels

    @property
    def sizes(self) -> tuple[int, ...]:
        return self._sizes

    @property
    def nelements(self) -> int:
        return self._nelements

    def __getitem__(self, label: str) -> int:
        try:
            return self._sizes[self._labels.index(label)]
        except ValueError:
            raise KeyError(label) from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._labels)

    def __len__(self) -> int:
        return len(self._labels)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Extent):
            return self._labels == other._labels and self._sizes == other._sizes
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self._labels, self._sizes))

    def __repr__(self) -> str:
        return f"Extent({dict(self)})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (Extent, (self._labels, self._sizes))


class Point(Mapping[str, int]):
    """One position in an `Extent`: its row-major ``rank`` and its coordinates by label."""

    __slots__ = ("_extent", "_rank")

    def __init__(self, rank: int, extent: Extent) -> None:
        if not 0 <= rank < extent.nelements:
            raise ValueError(f"rank {rank} out of range for {extent}")
        self._rank = rank
        self._extent = extent

    @property
    def rank(self) -> int:
        return self._rank

    @property
    def extent(self) -> Extent:
        return self._extent

    def coordinates(self) -> tuple[int, ...]:
        coords = []
        rest = self._rank
        for size in reversed(self._extent.sizes):
            rest, c = divmod(rest, size)
            coords.append(c)
        return tuple(reversed(coords))

    def __getitem__(self, label: str) -> int:
        try:
            index = self._extent.labels.index(label)
        except ValueError:
            raise KeyError(label) from None
        return self.coordinates()[index]

    def __iter__(self) -> Iterator[str]:
        return iter(self._extent.labels)

    def __len__(self) -> int:
        return len(self._extent)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Point):
            return self._rank == other._rank and self._extent == other._extent
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self._rank, self._extent))

    def __repr__(self) -> str:
        return f"Point({dict(self)})"

    def __str__(self) -> str:
        """Each dimension's coordinate and size, as Monarch writes them: ``{'gpus': 3/8}``."""
        coords = self.coordinates()
        sizes = self._extent.sizes
        parts = (f"{label!r}: {c}/{n}" for label, c, n in zip(self._extent.labels, coords, sizes))
        return "{" + ", ".join(parts) + "}"

    def __reduce__(self) -> tuple[Any, ...]:
        return (Point, (self._rank, self._extent))


class Slice:
    """A strided view into a flat list: coordinates map to ``offset + sum(c * stride)``."""

    __slots__ = ("offset", "sizes", "strides")

    def __init__(self, offset: int, sizes: Sequence[int], strides: Sequence[int]) -> None:
        if len(sizes) != len(strides):
            raise ValueError("sizes and strides differ in length")
        self.offset = offset
        self.sizes = tuple(sizes)
        self.strides = tuple(strides)

    @classmethod
    def dense(cls, sizes: Sequence[int], offset: int = 0) -> Slice:
        strides = []
        step = 1
        for size in reversed(sizes):
            strides.append(step)
            step *= size
        return cls(offset, sizes, tuple(reversed(strides)))

    def __len__(self) -> int:
        return math.prod(self.sizes)

    def location(self, coords: Sequence[int]) -> int:
        return self.offset + sum(c * s for c, s in zip(coords, self.strides))

    def ranks(self) -> list[int]:
        """The flat-list positions of every member, in row-major order."""
        ranks = [self.offset]
        for size, stride in zip(self.sizes, self.strides):
            ranks = [r + i * stride for r in ranks for i in range(size)]
        return ranks

    def is_dense(self) -> bool:
        return self.strides == Slice.dense(self.sizes).strides

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Slice):
            return (self.offset, self.sizes, self.strides) == (
                other.offset,
                other.sizes,
                other.strides,
            )
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self.offset, self.sizes, self.strides))

    def __repr__(self) -> str:
        return f"Slice(offset={self.offset}, sizes={self.sizes}, strides={self.strides})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (Slice, (self.offset, self.sizes, self.strides))


class Shape:
    """Labelled dimensions over a `Slice` of a flat list of members."""

    __slots__ = ("_ranks", "labels", "ndslice")

    def __init__(self, labels: Sequence[str], ndslice: Slice) -> None:
        self.labels = tuple(labels)
        self.ndslice = ndslice
        self._ranks: list[int] | None = None
        Extent.of(self.labels, ndslice.sizes)

    @classmethod
    def from_extent(cls, extent: Extent) -> Shape:
        return cls(extent.labels, Slice.dense(extent.sizes))

    @classmethod
    def unity(cls) -> Shape:
        """The shape of a single member with no dimensions."""
        return cls((), Slice(0, (), ()))

    @property
    def extent(self) -> Extent:
        return Extent.of(self.labels, self.ndslice.sizes)

    def __len__(self) -> int:
        return len(self.ndslice)

    def ranks(self) -> list[int]:
        """Flat-list positions of the members, in row-major order of this shape."""
        if self._ranks is None:
            self._ranks = self.ndslice.ranks()
        return self._ranks

    def point(self, index: int) -> Point:
        """The `Point` of the ``index``-th member (row-major) of this shape."""
        return Point(index, self.extent)

    def _dim(self, label: str) -> int:
        try:
            return self.labels.index(label)
        except ValueError:
            raise ValueError(
                f"no dimension {label!r} in shape with dimensions {self.labels}"
            ) from None

    def slice(self, **dims: int | slice) -> Shape:
        """Select along dimensions: an int drops the dimension, a `slice` keeps it."""
        labels = list(self.labels)
        offset = self.ndslice.offset
        sizes = list(self.ndslice.sizes)
        strides = list(self.ndslice.strides)
        dropped = []
        for label, sel in dims.items():
            d = self._dim(label)
            size, stride = sizes[d], strides[d]
            if isinstance(sel, bool) or not isinstance(sel, (int, slice)):
                raise TypeError(f"select {label!r} with an int or a slice, not {sel!r}")
            if isinstance(sel, int):
                index = sel + size if sel < 0 else sel
                if not 0 <= index < size:
                    raise IndexError(
                        f"index {sel} out of range for dimension {label!r} of size {size}"
                    )
                offset += index * stride
                dropped.append(d)
            else:
                start, stop, step = sel.indices(size)
                if step < 1:
                    raise ValueError(f"slice step for {label!r} must be positive")
                count = len(range(start, stop, step))
                if count == 0:
                    raise ValueError(f"slice {sel} of dimension {label!r} (size {size}) is empty")
                offset += start * stride
                sizes[d] = count
                strides[d] = stride * step
        keep = [d for d in range(len(labels)) if d not in dropped]
        return Shape(
            [labels[d] for d in keep],
            Slice(offset, [sizes[d] for d in keep], [strides[d] for d in keep]),
        )

    def split(self, **dims: Any) -> Shape:
        """Split dimensions: ``split(host=("dp", "pp"), pp=16)``.

        Each keyword whose value is a sequence of labels names a dimension to split;
        the other keywords give sizes of new dimensions. At most one new dimension
        per split may omit its size; it is inferred.
        """
        splits = {k: tuple(v) for k, v in dims.items() if not isinstance(v, int)}
        given = {k: v for k, v in dims.items() if isinstance(v, int)}
        new_labels = [label for parts in splits.values() for label in parts]
        unknown = set(given) - set(new_labels)
        if unknown:
            raise ValueError(f"sizes given for dimensions that no split creates: {sorted(unknown)}")
        labels: list[str] = []
        sizes: list[int] = []
        strides: list[int] = []
        for label, size, stride in zip(self.labels, self.ndslice.sizes, self.ndslice.strides):
            if label not in splits:
                labels.append(label)
                sizes.append(size)
                strides.append(stride)
                continue
            parts = splits[label]
            known = [given.get(p) for p in parts]
            missing = [i for i, s in enumerate(known) if s is None]
            if len(missing) > 1:
                raise ValueError(f"splitting {label!r}: give the sizes of all but one of {parts}")
            product = math.prod(s for s in known if s is not None)
            if missing:
                if product == 0 or size % product:
                    raise ValueError(
                        f"dimension {label!r} of size {size} is not divisible by {product}"
                    )
                known[missing[0]] = size // product
            elif product != size:
                raise ValueError(f"sizes {known} of {parts} do not multiply to {size}")
            part_stride = stride * math.prod(known)
            for part, part_size in zip(parts, known):
                part_stride //= part_size
                labels.append(part)
                sizes.append(part_size)
                strides.append(part_stride)
        return Shape(labels, Slice(self.ndslice.offset, sizes, strides))

    def flatten(self, name: str) -> Shape:
        """Merge all dimensions into one named ``name``; the shape must be dense."""
        if not self._is_contiguous():
            raise ValueError("flatten needs a dense shape; this one was sliced with gaps")
        return Shape([name], Slice(self.ndslice.offset, [len(self)], [self._innermost_stride()]))

    def _innermost_stride(self) -> int:
        return self.ndslice.strides[-1] if self.ndslice.strides else 1

    def _is_contiguous(self) -> bool:
        expected = self._innermost_stride()
        for size, stride in zip(reversed(self.ndslice.sizes), reversed(self.ndslice.strides)):
            if size > 1 and stride != expected:
                return False
            expected *= size
        return True

    def rename(self, **names: str) -> Shape:
        """Rename dimensions: ``rename(gpus="workers")``."""
        for old in names:
            self._dim(old)
        return Shape([names.get(label, label) for label in self.labels], self.ndslice)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Shape):
            return self.labels == other.labels and self.ndslice == other.ndslice
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self.labels, self.ndslice))

    def __repr__(self) -> str:
        return f"Shape({dict(self.extent)}, {self.ndslice!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (Shape, (self.labels, self.ndslice))


M = TypeVar("M", bound="MeshTrait")
"""A mesh's own type: slicing a mesh gives the same kind of mesh."""


class MeshTrait:
    """Slicing shared by host, proc, actor and value meshes.

    Subclasses provide ``_shape`` and ``_with_shape(shape)``, which returns the
    same kind of mesh restricted to ``shape``.
    """

    _shape: Shape

    def _with_shape(self: M, shape: Shape) -> M:
        raise NotImplementedError

    def slice(self: M, **dims: int | slice) -> M:
        """Select members: an int drops that dimension, a `slice` keeps it."""
        return self._with_shape(self._shape.slice(**dims))

    def split(self: M, **dims: Any) -> M:
        """Split a dimension in several, e.g. ``split(hosts=("dp", "pp"), pp=2)``."""
        return self._with_shape(self._shape.split(**dims))

    def flatten(self: M, name: str) -> M:
        """Merge all dimensions into one called ``name``."""
        return self._with_shape(self._shape.flatten(name))

    def rename(self: M, **names: str) -> M:
        """Rename dimensions, e.g. ``rename(gpus="workers")``."""
        return self._with_shape(self._shape.rename(**names))

    def size(self, dim: str | Sequence[str] | None = None) -> int:
        """Number of members; the size of dimension ``dim``; or, given several
        dimensions, the product of their sizes."""
        if dim is None:
            return len(self._shape)
        if isinstance(dim, str):
            extent = self._shape.extent
            if dim not in extent:
                raise KeyError(f"{self!r} has no dimension {dim!r}; it has {list(extent.labels)}")
            return extent[dim]
        return math.prod(self.size(d) for d in dim)

    @property
    def sizes(self) -> dict[str, int]:
        return dict(self._shape.extent)

    @property
    def extent(self) -> Extent:
        return self._shape.extent

    def __len__(self) -> int:
        return len(self._shape)
