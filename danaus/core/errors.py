"""The exceptions users see."""

from __future__ import annotations

from typing import Any


class ActorError(Exception):
    """An endpoint raised: carries the remote exception and its traceback.

    The actor that raised is still alive; only the one call failed.
    """

    def __init__(self, actor: str, exception: BaseException, traceback: str) -> None:
        self.actor = actor
        self.exception = exception
        self.traceback = traceback
        super().__init__(actor, exception, traceback)

    @property
    def message(self) -> str:
        return f"{type(self.exception).__name__}: {self.exception}"

    def __str__(self) -> str:
        return (
            f"actor {self.actor} raised {self.message}\n"
            f"remote traceback:\n{self.traceback.rstrip()}"
        )


class SupervisionError(Exception):
    """The actor (or its process) failed, so the call cannot complete."""

    def __init__(self, message: str, failure: Any = None) -> None:
        self.failure = failure
        super().__init__(message)

    def __reduce__(self) -> tuple[Any, ...]:
        return (SupervisionError, (str(self), self.failure))


class MeshStoppedError(RuntimeError):
    """The mesh (or actor) was stopped; it takes no more messages."""


class SerializationError(TypeError):
    """A value could not be pickled or unpickled for sending between processes."""


class RemoteException(Exception):
    """Stands in for a remote exception that could not itself be pickled."""

    def __init__(self, type_name: str, text: str) -> None:
        self.type_name = type_name
        self.text = text
        super().__init__(type_name, text)

    def __str__(self) -> str:
        return f"{self.type_name}: {self.text}"
