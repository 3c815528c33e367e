"""The exceptions users see."""

from __future__ import annotations

from typing import Any

import cloudpickle

from danaus.core.imports import unpickle

CAUSE = "cause"
"""``raise Outer from inner``: the inner exception is the outer one's ``__cause__``."""
CONTEXT = "context"
"""An exception raised while handling another: the other is its ``__context__``."""


class ActorError(Exception):
    """An endpoint raised: carries the remote exception, its chain and its traceback.

    The actor that raised is still alive; only the one call failed. ``exception``
    is the remote exception rebuilt here, with its ``__cause__`` or
    ``__context__`` chain as it was raised; where an exception cannot be rebuilt
    here (its class cannot be imported, or its constructor takes other
    arguments), a `RemoteException` with its class name and message stands in
    for it. ``traceback`` is the remote traceback of the whole chain, as Python
    would print it. ``call`` names the call that failed, as ``mesh.endpoint``
    (the message begins ``Actor call mesh.endpoint failed``, as Monarch's does).
    """

    def __init__(
        self, actor: str, exception: BaseException, traceback: str, call: str | None = None
    ) -> None:
        self.actor = actor
        self.exception = exception
        self.traceback = traceback
        self.call = call
        super().__init__(actor, exception, traceback)

    @property
    def message(self) -> str:
        """The remote exception's class name and message."""
        if isinstance(self.exception, RemoteException):
            return str(self.exception)
        return f"{type(self.exception).__name__}: {self.exception}"

    def __str__(self) -> str:
        context = f"Actor call {self.call} failed: " if self.call else ""
        return (
            f"{context}actor {self.actor} raised {self.message}\n"
            f"remote traceback:\n{self.traceback.rstrip()}"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        chain = _pack_chain(self.exception)
        return (_rebuild_actor_error, (self.actor, self.traceback, chain, self.call))


def _pack_chain(exc: BaseException) -> list[tuple[bytes | None, str, str, str | None]]:
    """Each exception of the chain pickled on its own, outermost first, with how it links on."""
    packed: list[tuple[bytes | None, str, str, str | None]] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        link, following = chain_link(current)
        try:
            blob: bytes | None = cloudpickle.dumps(current)
        except Exception:
            blob = None
        packed.append((blob, type(current).__qualname__, str(current), link))
        current = following
    return packed


def chain_link(exc: BaseException) -> tuple[str | None, BaseException | None]:
    """How ``exc`` leads on to the exception before it (`CAUSE`, `CONTEXT`), and that one."""
    if exc.__cause__ is not None:
        return CAUSE, exc.__cause__
    if exc.__context__ is not None and not exc.__suppress_context__:
        return CONTEXT, exc.__context__
    return None, None


def _unpack(blob: bytes | None, type_name: str, text: str) -> BaseException:
    if blob is not None:
        try:
            exc = unpickle(blob)
        except Exception:
            pass
        else:
            if isinstance(exc, BaseException):
                return exc
    return RemoteException(type_name, text)


def _rebuild_actor_error(
    actor: str,
    traceback: str,
    chain: list[tuple[bytes | None, str, str, str | None]],
    call: str | None = None,
) -> ActorError:
    excs = [_unpack(blob, name, text) for blob, name, text, _ in chain]
    for (_, _, _, link), exc, following in zip(chain, excs, excs[1:]):
        if link == CAUSE:
            exc.__cause__ = following
        else:
            exc.__context__ = following
    return ActorError(actor, excs[0], traceback, call)


class SupervisionError(RuntimeError):
    """The actor (or its process) failed, so the call cannot complete.

    A `RuntimeError`, as Monarch's is.
    """

    def __init__(self, message: str, failure: Any = None) -> None:
        self.failure = failure
        super().__init__(message)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (str(self), self.failure))


class MeshStoppedError(SupervisionError):
    """The mesh (or actor) was stopped; it takes no more messages.

    A `SupervisionError`, as in Monarch, so that ``except SupervisionError``
    catches calls to stopped meshes too.
    """


class SerializationError(TypeError):
    """A value could not be pickled or unpickled for sending between processes."""


class MessageTooLargeError(ValueError):
    """A message is larger than the job's ``max_message_bytes``; it was not delivered.

    Raised where the message is sent (the arguments of a call, a value sent to
    a port), or at the caller when the answer, or the receiving proc, refused it.
    The message names the size and the limit.
    """


class RemoteException(Exception):
    """Stands in for a remote exception that could not be rebuilt here."""

    def __init__(self, type_name: str, text: str) -> None:
        self.type_name = type_name
        self.text = text
        super().__init__(type_name, text)

    def __str__(self) -> str:
        return f"{self.type_name}: {self.text}"
