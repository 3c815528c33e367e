"""Streams: ordered queues of work on every proc, which run side by side; and borrows.

Every proc runs each stream's commands in order, and different streams at the
same time (a thread each on real transports; interleaved, deterministically,
on the simulator). A tensor belongs to the stream that defined it, and only
work on that stream may use it, until it is lent to another: ``t2, borrow =
stream.borrow(t)`` gives ``t2``, the same shards seen from ``stream``, which
waits on the proc until the work that defined ``t`` is done. While lent,
``t`` may be read but not written (``mutable=False``, the default), or not
used at all (``mutable=True``); ``borrow.drop()`` hands it back, and the first
stream then waits for the other's work on it before going on.
"""

from __future__ import annotations

import traceback
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from danaus.tensor import commands

if TYPE_CHECKING:
    from danaus.tensor.handle import Storage, Tensor


class Stream:
    """A queue of work on each proc of a mesh: ``Stream("comms")``."""

    def __init__(self, name: str, _default: bool = False) -> None:
        self.name = name
        self.default = _default

    def activate(self) -> Any:
        """Make this the stream new work goes to: ``with comms.activate(): ...``."""
        return _activated(self)

    def borrow(self, tensor: Tensor, mutable: bool = False) -> tuple[Tensor, Borrow]:
        """``tensor`` lent to this stream: the tensor as this stream sees it, and the `Borrow`.

        ``mutable`` lets this stream write to it, and keeps its own stream from
        reading it, until ``borrow.drop()``.
        """
        from danaus.tensor.handle import Tensor as Handle

        if not isinstance(tensor, Handle):
            raise TypeError(f"borrow takes a danaus.Tensor, not {type(tensor).__name__}")
        if tensor.dropped:
            raise ValueError("cannot borrow a tensor that was dropped")
        if tensor._stream is self:
            raise ValueError(f"{tensor!r} is already on {self}")
        origin = tensor._storage
        if mutable and origin.access != "rw":
            raise RuntimeError(
                "cannot borrow this tensor mutably: it (or a view of it) is already lent to "
                "another stream"
            )
        if "r" not in origin.access:
            raise RuntimeError("cannot borrow this tensor: it is lent mutably to another stream")
        engine = tensor._engine
        event = engine.new_event()
        lent = engine.alias(tensor, self, event)
        borrow = Borrow(tensor, lent, mutable, engine.new_event())
        origin.access = "" if mutable else "r"
        lent._storage.access = "rw" if mutable else "r"
        origin.borrows.append(borrow)
        return lent, borrow

    def __repr__(self) -> str:
        return f"<Stream {self.name!r}>"

    def __str__(self) -> str:
        return f"stream {self.name!r}"


class Borrow:
    """A tensor lent to another stream until `drop` (also on leaving ``with borrow:``)."""

    def __init__(self, origin: Tensor, lent: Tensor, mutable: bool, returned: int) -> None:
        self._origin = origin
        self._lent = lent
        self._mutable = mutable
        self._returned = returned
        self._dropped = False
        self._frames = traceback.extract_stack()[:-2]

    @property
    def traceback(self) -> str:
        """Where the borrow was made."""
        return "".join(traceback.format_list(self._frames))

    def drop(self) -> None:
        """End the borrow: the lent tensor is dropped, and its stream's work on it must be
        done before the first stream uses the tensor again."""
        if self._dropped:
            return
        self._dropped = True
        lent, origin = self._lent, self._origin
        engine = lent._engine
        engine.record(lent._mesh, lent._stream, (commands.SIGNAL, self._returned))
        lent.drop()
        engine.record(origin._mesh, origin._stream, (commands.WAIT, self._returned))
        storage: Storage = origin._storage
        storage.borrows.remove(self)
        if not storage.borrows:
            storage.access = "rw"

    def __enter__(self) -> Borrow:
        return self

    def __exit__(self, *exc: object) -> None:
        self.drop()

    def __del__(self) -> None:
        if not self.__dict__.get("_dropped", True):
            self.drop()


DEFAULT = Stream("main", _default=True)
"""The stream work goes to unless another is active."""

_active: ContextVar[Stream] = ContextVar("danaus_tensor_stream", default=DEFAULT)


def get_active_stream() -> Stream:
    """The stream new work goes to."""
    return _active.get()


class _activated:
    """Activates a stream at once; leaving the ``with`` block restores the one before."""

    def __init__(self, stream: Stream) -> None:
        self._token = _active.set(stream)

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        _active.reset(self._token)
