"""Actor, the endpoint decorator, and the endpoint table callers check arguments against."""

from __future__ import annotations

import inspect
import logging
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, Protocol, TypeVar, overload

from danaus.core.suggest import close_names

if TYPE_CHECKING:
    from typing import Concatenate

    from danaus.core.endpoint import Endpoint
    from danaus.core.future import Future
    from danaus.core.shape import MeshTrait
    from danaus.core.undeliverable import UndeliverableMessageEnvelope

F = TypeVar("F", bound=Callable[..., Any])
P = ParamSpec("P")
R = TypeVar("R")


class EndpointMethod(Generic[P, R]):
    """What a method marked `endpoint` is to a type checker (at run time it stays the method).

    Read on a mesh of its actors (`ProcMesh.spawn` types the mesh as the actor's class) it is
    an `Endpoint` whose adverbs take the method's parameters and answer with its return type
    (an ``async def`` method's awaited one): ``trainers.train.call(step=0)`` is a
    ``Future[ValueMesh[float]]`` when ``train`` returns ``float``. Read inside the actor
    (``self.train(0)``) it is the method itself.
    """

    def __get__(self, instance: object, owner: type | None = None) -> Endpoint[P, R]:
        raise NotImplementedError  # never made: it describes the method to type checkers


class _Marker(Protocol):
    """What ``endpoint(...)`` with options returns, to a type checker: a decorator."""

    @overload
    def __call__(
        self, method: Callable[Concatenate[Any, P], Awaitable[R]]
    ) -> EndpointMethod[P, R]: ...

    @overload
    def __call__(self, method: Callable[Concatenate[Any, P], R]) -> EndpointMethod[P, R]: ...


_ENDPOINT_ATTR = "__danaus_endpoint__"
_SHARED_ARGUMENTS_ATTR = "__danaus_shared_arguments__"


@dataclass(frozen=True)
class _EndpointOptions:
    explicit_response_port: bool = False
    concurrent: bool = False
    plain: bool = False


_NO_DEFAULT = inspect.Parameter.empty


class _HasDefault:
    def __repr__(self) -> str:
        return "..."


_DEFAULT = _HasDefault()


@dataclass(frozen=True)
class EndpointSpec:
    """What a caller needs to know of an endpoint: its name and parameters.

    It travels inside mesh references, so it holds parameter kinds and names
    but neither the function nor its annotations.
    """

    owner: str
    name: str
    params: tuple[tuple[str, int, bool], ...]
    is_async: bool
    explicit_response_port: bool
    concurrent: bool = False
    """The body runs as a task of its own (`concurrent_endpoint`)."""
    plain: bool = False
    """A method without `endpoint`: callable only through `as_endpoint`."""
    shared_arguments: bool = field(default=False, compare=False, repr=False)
    """Its arguments are values that nothing changes (`shared_arguments`); known only where
    the actor's class is: it does not travel."""
    _signature: inspect.Signature | None = field(default=None, compare=False, repr=False)
    _binder: Callable[..., None] | None = field(default=None, compare=False, repr=False)

    @classmethod
    def of(cls, owner: str, fn: Callable[..., Any], options: _EndpointOptions) -> EndpointSpec:
        params = list(inspect.signature(fn).parameters.values())[1:]
        if options.explicit_response_port:
            if not params:
                raise TypeError(
                    f"{owner}.{fn.__name__} takes a response port but has no parameter for it"
                )
            params = params[1:]
        return cls(
            owner=owner,
            name=fn.__name__,
            params=tuple((p.name, int(p.kind), p.default is not _NO_DEFAULT) for p in params),
            is_async=inspect.iscoroutinefunction(fn),
            explicit_response_port=options.explicit_response_port,
            concurrent=options.concurrent,
            plain=options.plain,
            shared_arguments=getattr(fn, _SHARED_ARGUMENTS_ATTR, False),
        )

    def signature(self) -> inspect.Signature:
        if self._signature is None:
            sig = inspect.Signature(
                [
                    inspect.Parameter(
                        name,
                        kind,  # type: ignore[arg-type]  # inspect makes the int its kind
                        default=_DEFAULT if has else _NO_DEFAULT,
                    )
                    for name, kind, has in self.params
                ]
            )
            object.__setattr__(self, "_signature", sig)
        return self._signature  # type: ignore[return-value]

    def check(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Raise `TypeError` here, at the call site, if the arguments do not fit.

        Arguments are bound by a function of the endpoint's parameters that does
        nothing (Python's own binding, fast); only when that fails does the
        signature bind them again, for its message.
        """
        binder = self._binder
        if binder is None:
            binder = _binder(self.signature())
            object.__setattr__(self, "_binder", binder)
        try:
            binder(*args, **kwargs)
        except TypeError:
            raise TypeError(f"{self.owner}.{self.name}(): {self._mismatch(args, kwargs)}") from None

    def _mismatch(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
        """What is wrong with arguments that do not bind: every unexpected keyword first (with
        the closest parameter names), then what binding the rest still finds wrong."""
        signature = self.signature()
        named = [
            name
            for name, kind, _ in self.params
            if kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        ]
        takes_any = any(kind == inspect.Parameter.VAR_KEYWORD for _, kind, _ in self.params)
        unexpected = [] if takes_any else [key for key in kwargs if key not in named]
        problems = [
            f"unexpected keyword argument {key!r}{close_names(key, named)}" for key in unexpected
        ]
        try:
            signature.bind(*args, **{k: v for k, v in kwargs.items() if k not in unexpected})
        except TypeError as exc:
            problems.append(str(exc))
        return f"{'; '.join(problems)} (it takes {self.name}{signature})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            EndpointSpec,
            (
                self.owner,
                self.name,
                self.params,
                self.is_async,
                self.explicit_response_port,
                self.concurrent,
                self.plain,
            ),
        )


def _binder(signature: inspect.Signature) -> Callable[..., None]:
    """A function with ``signature``'s parameters that does nothing, to bind arguments with."""
    plain = signature.replace(
        parameters=[
            p.replace(default=None if p.default is not _NO_DEFAULT else _NO_DEFAULT)
            for p in signature.parameters.values()
        ]
    )
    if not all(name.isidentifier() for name in plain.parameters):
        return signature.bind
    namespace: dict[str, Any] = {}
    exec(f"def bind{plain}:\n    pass", namespace)
    return namespace["bind"]


@overload
def endpoint(method: Callable[Concatenate[Any, P], Awaitable[R]]) -> EndpointMethod[P, R]: ...


@overload
def endpoint(method: Callable[Concatenate[Any, P], R]) -> EndpointMethod[P, R]: ...


@overload
def endpoint(
    method: None = None,
    *,
    explicit_response_port: bool = False,
    propagate: Any = None,
    instrument: bool = True,
) -> _Marker: ...


def endpoint(
    method: Any = None,
    *,
    explicit_response_port: bool = False,
    propagate: Any = None,
    instrument: bool = True,
) -> Any:
    """Mark an actor method (sync or ``async def``) as callable on meshes of the actor.

    With ``explicit_response_port=True`` the method receives a `Port` right
    after ``self`` and answers through it instead of returning a value.
    ``propagate`` and ``instrument`` are accepted for compatibility and ignored.
    """
    options = _EndpointOptions(explicit_response_port=explicit_response_port)

    def mark(fn: F) -> F:
        setattr(fn, _ENDPOINT_ATTR, options)
        return fn

    return mark(method) if method is not None else mark


def shared_arguments(fn: F) -> F:
    """Mark an endpoint of Danaus's own agents whose arguments are values that nothing changes
    (a spawn order): the procs of one OS process may share them, decoded once
    (`World.decode_shared`), as every member of a mesh is sent the same."""
    setattr(fn, _SHARED_ARGUMENTS_ATTR, True)
    return fn


@overload
def concurrent_endpoint(
    method: Callable[Concatenate[Any, P], Awaitable[R]],
) -> EndpointMethod[P, R]: ...


@overload
def concurrent_endpoint(
    method: None = None,
    *,
    explicit_response_port: bool = False,
    propagate: Any = None,
    instrument: bool = True,
) -> _Marker: ...


def concurrent_endpoint(
    method: Any = None,
    *,
    explicit_response_port: bool = False,
    propagate: Any = None,
    instrument: bool = True,
) -> Any:
    """Mark an ``async def`` actor method as an endpoint whose body runs as a task of its own.

    The actor goes on to its next message as soon as the body has started (run
    to its first ``await``), so several calls may run at once on the actor's
    event loop; each body starts before the actor takes its next message.
    An exception in the body answers the caller with `ActorError`, as for
    `endpoint`; with ``explicit_response_port=True``, or when nobody waits for an
    answer (``broadcast``), it fails the actor instead. When the actor stops or
    fails, the bodies still running are cancelled, and their callers answered,
    before ``__cleanup__`` runs. The options are those of `endpoint`.
    """
    options = _EndpointOptions(explicit_response_port=explicit_response_port, concurrent=True)

    def mark(fn: F) -> F:
        if hasattr(fn, _ENDPOINT_ATTR):
            raise ValueError(
                "concurrent_endpoint does not wrap @endpoint; "
                "pass endpoint options to @concurrent_endpoint instead"
            )
        if not inspect.iscoroutinefunction(fn):
            raise ValueError(
                f"concurrent_endpoint can only wrap async endpoints; {fn.__qualname__} is not async"
            )
        setattr(fn, _ENDPOINT_ATTR, options)
        return fn

    return mark(method) if method is not None else mark


if TYPE_CHECKING:

    class _SpawnedMesh(MeshTrait):
        """What a type checker sees of a spawned mesh besides its endpoints: `ProcMesh.spawn`
        types the mesh as its actor class, so the class must have the mesh's members too."""

        @property
        def initialized(self) -> Future[None]: ...

        def stop(self, timeout: float = ...) -> Future[None]: ...

else:
    _SpawnedMesh = object


class Actor(_SpawnedMesh):
    """Base class of actors.

    An actor handles one message at a time, in arrival order. Its methods marked
    with `endpoint` can be called on a mesh of actors. Optional hooks:

    * ``__supervise__(self, failure)`` is told of failures of meshes this actor
      spawned; return True when handled.
    * ``__cleanup__(self, exc)`` runs when the actor stops (``exc`` is None on a
      graceful stop).
    * ``_handle_undeliverable_message(self, message)`` is told of a message this
      actor sent that could not be delivered; see below.
    """

    @property
    def logger(self) -> logging.Logger:
        """A logger named after the actor's class."""
        return logging.getLogger(f"danaus.actor.{type(self).__qualname__}")

    @endpoint
    async def __initialized__(self) -> None:
        """Answers once ``__init__`` has run: behind it in the mailbox (``mesh.initialized``)."""

    def _handle_undeliverable_message(self, message: UndeliverableMessageEnvelope) -> bool:
        """A message this actor sent could not be delivered: return True if that is handled.

        It runs at the actor's next safe point (as ``__supervise__`` does) and
        may be ``async``. The default returns False: the actor fails, and its
        owner is told. A message is undeliverable when its proc finds no
        destination for it: a message that expects no answer (``broadcast``,
        `send` without a port) sent to an actor that has stopped or failed; or a
        value sent through a `Port` whose ``return_undeliverable`` is True (the
        default) to a port that was never opened there. Values sent to a port
        its receiver has closed are dropped, and so are messages to a proc that
        is lost (its loss is reported to the owners of its actors).
        """
        return False


_tables: weakref.WeakKeyDictionary[type, dict[str, EndpointSpec]] = weakref.WeakKeyDictionary()


_PLAIN = _EndpointOptions(plain=True)


def endpoints_of(cls: type) -> dict[str, EndpointSpec]:
    """The endpoint table of an actor class (computed once per class).

    It also lists the class's public plain methods (``plain`` specs), which
    callers reach only through `as_endpoint`. Kept beside the class rather than
    on it, so that pickling a class by value gives the same bytes before and
    after its first use.
    """
    table = _tables.get(cls)
    if table is None:
        table = {}
        for klass in reversed(cls.__mro__):
            for name, value in vars(klass).items():
                options = getattr(value, _ENDPOINT_ATTR, None)
                if options is None and inspect.isfunction(value) and not name.startswith("_"):
                    options = _PLAIN
                if options is not None:
                    table[name] = EndpointSpec.of(cls.__qualname__, value, options)
                elif name in table:
                    del table[name]
        _tables[cls] = table
    return table
