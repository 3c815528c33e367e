"""`RemoteTensorError`: an operation failed on a proc, and a value from it was asked for."""

from __future__ import annotations

import contextlib
import pickle
from typing import Any

import cloudpickle

from danaus.core.errors import RemoteException


class TensorUsageError(RuntimeError):
    """A handle used where it may not be, caught in the controller before anything is sent: it
    was dropped, it is on another mesh or stream, or it is lent to another stream.

    Not a `TypeError`: torch turns those into ``NotImplemented`` in its operators (``t + 1``
    would then report unsupported operand types instead of this message).
    """


class RemoteTensorError(Exception):
    """An operation failed on a proc of a mesh; raised where a value that depends on it is fetched.

    The proc stays usable and work that does not depend on the failure goes on.
    ``rank`` is the coordinates of the proc where it failed, ``operation`` what
    failed, ``exception`` the remote exception (rebuilt here, or a
    `danaus.RemoteException` standing in for it), ``traceback`` the remote
    traceback. ``depends`` is True when the fetched tensor was not made by the
    failed operation but computed from its result (it is *poisoned*).
    """

    def __init__(
        self,
        rank: dict[str, int],
        operation: str,
        exception: BaseException,
        traceback: str,
        depends: bool = False,
        issued: str = "",
        issued_at: tuple[int, int] | None = None,
    ) -> None:
        self.rank = rank
        self.operation = operation
        self.exception = exception
        self.traceback = traceback
        self.depends = depends
        self.issued = issued
        """Where the controller's code issued the failed operation (a traceback), when known."""
        self.issued_at = issued_at
        """The failed command's place in the engine's command stream."""
        super().__init__(rank, operation)

    def __str__(self) -> str:
        what = "a tensor that depends on the failed operation was fetched: " if self.depends else ""
        where = (
            f"\nissued in the controller (most recent call last):\n{self.issued.rstrip()}"
            if self.issued
            else ""
        )
        return (
            f"{what}{self.operation} failed on rank {self.rank}: "
            f"{type(self.exception).__name__}: {self.exception}{where}\n"
            f"remote traceback:\n{self.traceback.rstrip()}"
        )

    def dependent(self) -> RemoteTensorError:
        """This error as seen from a tensor computed from the failed one."""
        return RemoteTensorError(
            self.rank,
            self.operation,
            self.exception,
            self.traceback,
            True,
            self.issued,
            self.issued_at,
        )

    def __reduce__(self) -> tuple[Any, ...]:
        try:
            packed: bytes | None = cloudpickle.dumps(self.exception)
        except Exception:
            packed = None
        return (
            _rebuild,
            (
                self.rank,
                self.operation,
                packed,
                type(self.exception).__qualname__,
                str(self.exception),
                self.traceback,
                self.depends,
                self.issued,
                self.issued_at,
            ),
        )


def _rebuild(
    rank: dict[str, int],
    operation: str,
    packed: bytes | None,
    type_name: str,
    text: str,
    traceback: str,
    depends: bool,
    issued: str,
    issued_at: tuple[int, int] | None,
) -> RemoteTensorError:
    exception: BaseException = RemoteException(type_name, text)
    if packed is not None:
        with contextlib.suppress(Exception):
            exception = pickle.loads(packed)
    return RemoteTensorError(rank, operation, exception, traceback, depends, issued, issued_at)
