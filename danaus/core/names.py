"""Compact lists of numbered names: the members of meshes of thousands of procs."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, overload


class NumberedNames(Sequence[str]):
    """The names ``{prefix}0`` ... ``{prefix}{count-1}``, stored compactly.

    Meshes carry the names of their members in every message that refers to
    them; at thousands of members a list of strings would dominate the message.
    """

    __slots__ = ("count", "prefix")

    def __init__(self, prefix: str, count: int) -> None:
        self.prefix = prefix
        self.count = count

    @overload
    def __getitem__(self, index: int) -> str: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[str]: ...
    def __getitem__(self, index: int | slice) -> str | Sequence[str]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self.count))]
        if index < 0:
            index += self.count
        if not 0 <= index < self.count:
            raise IndexError(index)
        return f"{self.prefix}{index}"

    def __len__(self) -> int:
        return self.count

    def __iter__(self) -> Iterator[str]:
        return (f"{self.prefix}{i}" for i in range(self.count))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, NumberedNames):
            return (self.prefix, self.count) == (other.prefix, other.count)
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self.prefix, self.count))

    def __repr__(self) -> str:
        return f"NumberedNames({self.prefix!r}, {self.count})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (NumberedNames, (self.prefix, self.count))
