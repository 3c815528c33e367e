"""Values decoded once for all the simulated procs that receive the same bytes.

Every simulated proc lives in the one OS process, and a message cast to a
mesh brings each member equal bytes: an actor's pickled class, say, which
takes tens of microseconds to unpickle (a class defined in the program's
``__main__`` travels by value) and unpickles to the very same class object in
every proc. `DecodedOnce` keeps what the last few such frames decoded to, keyed
by their bytes, so that ten thousand members decode them once. It keeps only
values that the decoding function says nothing can change (`World.decode_shared`):
a list among an actor's arguments, say, is each member's own, as on a real
transport, where each proc decodes its own bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from danaus.core.serialize import Buffer

T = TypeVar("T")

KEPT = 64
"""How many decoded values are kept: a mesh's members receive theirs one after the other, so a
few suffice, and a program that spawns many meshes does not grow the memory without bound."""

LARGEST = 256 * 1024
"""Frames of more bytes than this are decoded by every proc, as on a real transport: kept, they
would hold their memory (and their value's) after every member has its own."""


class DecodedOnce:
    """The shareable values decoded from the most recent frames (bytes only), oldest first."""

    def __init__(self) -> None:
        self._values: dict[tuple[Any, ...], Any] = {}

    def decode(
        self, frames: Sequence[Buffer], decode: Callable[[Sequence[Buffer]], tuple[T, bool]]
    ) -> T:
        """The value ``decode(frames)`` gives, or the one it gave earlier for frames of equal
        bytes if that one may be shared."""
        # A mutable buffer may change after it is decoded.
        if not all(type(frame) is bytes for frame in frames) or sum(map(len, frames)) > LARGEST:
            return decode(frames)[0]
        key = (decode, *frames)
        values = self._values
        if key in values:
            return values[key]
        value, shared = decode(frames)
        if shared:
            if len(values) >= KEPT:
                del values[next(iter(values))]
            values[key] = value
        return value
