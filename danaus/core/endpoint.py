"""Endpoints of actor meshes and their adverbs: call, call_one, choose, stream, broadcast.

Every adverb checks its arguments against the endpoint's signature and pickles
them where it is called, so a wrong or unpicklable argument raises there and
not in a remote actor.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any, Generic, Literal, ParamSpec, TypeVar, overload

from danaus.core.context import context
from danaus.core.future import Future, new_future
from danaus.core.placement import Placement
from danaus.core.ports import (
    FirstHandler,
    FoldHandler,
    GatherHandler,
    OutcomesHandler,
    Port,
    ReplyHandler,
    StreamHandler,
)
from danaus.core.serialize import Buffer, dumps
from danaus.core.shape import Shape
from danaus.core.value_mesh import ValueMesh
from danaus.core.wire import PLAIN_PORT, PLAIN_RETURNS, PortRef

if TYPE_CHECKING:
    from danaus.core.actor import EndpointSpec
    from danaus.core.instance import Instance
    from danaus.core.runtime import Runtime

P = ParamSpec("P")
R = TypeVar("R")
A = TypeVar("A")

ADVERBS = ("call", "call_one", "choose", "stream", "broadcast")
"""The ways to send a message to an endpoint."""

Expect = Callable[[list[str], "asyncio.AbstractEventLoop"], tuple["ReplyHandler", Any]]
"""Makes the handler for the replies from the given procs, and what the adverb returns."""


class Endpoint(Generic[P, R]):
    """One endpoint of a mesh (or slice) of actors: ``mesh.train``.

    For a type checker its adverbs take the parameters ``P`` of the endpoint's method and
    answer with its return type ``R``.
    """

    def __init__(self, at: Placement, spec: EndpointSpec, plain: int = 0) -> None:
        self._at = at
        self._spec = spec
        self._plain = plain

    @property
    def name(self) -> str:
        return self._spec.name

    def _prepare(
        self, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[Runtime, Instance, list[Buffer]]:
        self._at.check_usable(self._spec.name)
        self._spec.check(args, kwargs)
        payload = dumps((args, kwargs), "an argument of %s.%s()", self._spec.owner, self._spec.name)
        sender = context().actor_instance
        runtime = sender.runtime
        runtime.check_size(payload, "a call of %s.%s()", self._spec.owner, self._spec.name)
        return runtime, sender, payload

    def _cast(
        self,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        expect: Expect | None = None,
        *,
        choose: bool = False,
        reply: PortRef | None = None,
    ) -> Any:
        """Send to the mesh (or one chosen actor); ``expect`` makes the reply handler and result."""
        runtime, sender, payload = self._prepare(args, kwargs)
        at = self._at
        shape = at.shape
        targets = at.targets()
        if choose:
            index = sender.choose_index(at.mesh_id, len(targets))
            shape = shape.slice(**_coords_of(shape, index))
            targets = [(targets[index][0], 0)]
        result = handler = None
        if expect is not None:
            handler, result = expect([proc for proc, _ in targets], runtime.loop)
            handler.caller, handler.actor, handler.method = sender, at.mesh_id, self.name
            handler.mesh_name, handler.actor_class = at.name, self._spec.owner
            handler.shape = shape
            reply = runtime.open_port(handler)
        runtime.send_call(
            sender,
            targets,
            at.mesh_id,
            self._spec.name,
            shape,
            payload,
            reply,
            self._plain,
            handler,
        )
        return result

    def call(self, *args: P.args, **kwargs: P.kwargs) -> Future[ValueMesh[R]]:
        """Call every actor of the mesh; a future of their answers as a `ValueMesh`."""
        shape = self._at.shape

        def gather(
            procs: list[str], loop: asyncio.AbstractEventLoop
        ) -> tuple[ReplyHandler, Future[Any]]:
            afut, future = new_future(loop)
            return GatherHandler(procs, shape, afut), future

        return self._cast(args, kwargs, gather)

    def call_one(self, *args: P.args, **kwargs: P.kwargs) -> Future[R]:
        """Call the single actor of a mesh of exactly one actor."""
        shape = self._at.shape
        if len(shape) != 1:
            raise ValueError(
                f"call_one needs a mesh of exactly one actor; this one has {len(shape)} "
                f"({dict(shape.extent)}); slice it first or use call()"
            )
        return self._cast(args, kwargs, _first)

    def choose(self, *args: P.args, **kwargs: P.kwargs) -> Future[R]:
        """Call one actor of the mesh, chosen to spread load across calls."""
        return self._cast(args, kwargs, _first, choose=True)

    def stream(self, *args: P.args, **kwargs: P.kwargs) -> Iterator[Future[R]]:
        """Call every actor; one future per actor, settling in the order answers arrive."""

        def each(procs: list[str], loop: asyncio.AbstractEventLoop) -> tuple[ReplyHandler, Any]:
            made = [new_future(loop) for _ in procs]
            return StreamHandler(procs, [afut for afut, _ in made]), iter([f for _, f in made])

        return self._cast(args, kwargs, each)

    def broadcast(self, *args: P.args, **kwargs: P.kwargs) -> None:
        """Send to every actor without waiting. An exception in the endpoint fails the actor."""
        self._cast(args, kwargs)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Inside the actor, ``self.train(...)`` is the method itself; a mesh's endpoint is
        called through an adverb."""
        raise TypeError(
            f"an endpoint of a mesh is called through an adverb: "
            f"mesh.{self.name}.call(...), or call_one, choose, stream, broadcast"
        )

    def __repr__(self) -> str:
        return f"<Endpoint {self._spec.owner}.{self._spec.name} of {_mesh_repr(self._at)}>"


class NotAnEndpoint:
    """A method of the actors of a mesh that is not an endpoint: ``mesh.method``.

    It cannot be called directly; `as_endpoint` makes an `Endpoint` of it.
    """

    def __init__(self, at: Placement, spec: EndpointSpec) -> None:
        self._at = at
        self._spec = spec

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(self._not_an_endpoint("call"))

    def _not_an_endpoint(self, adverb: str) -> str:
        spec = self._spec
        return (
            f"{spec.owner}.{spec.name} is not an endpoint: mark the method @endpoint, or call it "
            f"through as_endpoint(mesh.{spec.name}).{adverb}(...)"
        )

    if not TYPE_CHECKING:  # type checkers should see no adverbs here: there are none

        def __getattr__(self, name: str) -> Any:
            if name in ADVERBS:
                raise AttributeError(self._not_an_endpoint(name))
            raise AttributeError(name)

    def __repr__(self) -> str:
        return f"<method {self._spec.owner}.{self._spec.name} of {_mesh_repr(self._at)}>"


@overload
def as_endpoint(
    not_an_endpoint: Callable[P, Awaitable[R]],
    *,
    propagate: Any = None,
    explicit_response_port: Literal[False] = False,
) -> Endpoint[P, R]: ...


@overload
def as_endpoint(
    not_an_endpoint: Callable[P, R],
    *,
    propagate: Any = None,
    explicit_response_port: Literal[False] = False,
) -> Endpoint[P, R]: ...


@overload
def as_endpoint(
    not_an_endpoint: Any, *, propagate: Any = None, explicit_response_port: bool
) -> Endpoint[..., Any]: ...


def as_endpoint(
    not_an_endpoint: Any, *, propagate: Any = None, explicit_response_port: bool = False
) -> Endpoint[..., Any]:
    """Call a method of a mesh's actors that is not marked `endpoint`, through the adverbs.

    ``as_endpoint(mesh.method).call(...)``: the method runs as an endpoint would
    (sync or async). With ``explicit_response_port=True`` it receives a `Port`
    after ``self`` and answers through it. Only public methods (whose name does
    not start with ``_``) can be called this way. ``propagate`` is accepted for
    compatibility and ignored.
    """
    if not isinstance(not_an_endpoint, NotAnEndpoint):
        raise ValueError(
            f"as_endpoint expects a method of a spawned actor mesh (mesh.method) that is not "
            f"an endpoint, got {not_an_endpoint!r}"
        )
    spec = not_an_endpoint._spec
    if explicit_response_port:
        if not spec.params:
            raise TypeError(
                f"{spec.owner}.{spec.name} takes a response port but has no parameter for it"
            )
        spec = dataclasses.replace(
            spec, params=spec.params[1:], explicit_response_port=True, _signature=None
        )
    kind = PLAIN_PORT if explicit_response_port else PLAIN_RETURNS
    return Endpoint(not_an_endpoint._at, spec, kind)


def fold(
    endpoint: Endpoint[..., R],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    identity: A,
    combine: Callable[[A, R], A],
) -> Future[A]:
    """Call every actor of ``endpoint``'s mesh; a future of their answers folded into one
    value with ``combine``, from ``identity``, as they arrive (or of the first error)."""

    def folding(procs: list[str], loop: asyncio.AbstractEventLoop) -> tuple[ReplyHandler, Any]:
        afut, future = new_future(loop)
        return FoldHandler(procs, afut, identity, combine), future

    return endpoint._cast(args, kwargs, folding)


def all_answered(
    endpoint: Endpoint[..., Any], args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
) -> Future[None]:
    """Call every actor of ``endpoint``'s mesh; a future that settles once all have
    answered (or with the first error)."""
    return fold(endpoint, args, kwargs or {}, None, _ignore)


def _ignore(acc: None, value: Any) -> None:
    return None


def outcomes(
    endpoint: Endpoint[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Future[list[Any]]:
    """Call every actor of ``endpoint``'s mesh; a future of each one's answer, or exception,
    in rank order, once every actor answered or was lost."""

    def each(procs: list[str], loop: asyncio.AbstractEventLoop) -> tuple[ReplyHandler, Any]:
        afut, future = new_future(loop)
        return OutcomesHandler(procs, afut), future

    return endpoint._cast(args, kwargs, each)


def _mesh_repr(at: Placement) -> str:
    return f"<ActorMesh {at.name} {dict(at.shape.extent)}>"


def _first(procs: list[str], loop: asyncio.AbstractEventLoop) -> tuple[ReplyHandler, Future[Any]]:
    afut, future = new_future(loop)
    return FirstHandler(procs, afut), future


def _coords_of(shape: Shape, index: int) -> dict[str, slice]:
    point = shape.point(index)
    return {label: slice(point[label], point[label] + 1) for label in shape.labels}


class Accumulator(Generic[R, A]):
    """Folds the answers of every actor of a mesh: ``Accumulator(ep, 0, operator.add)``."""

    def __init__(
        self, endpoint: Endpoint[..., R], identity: A, combine: Callable[[A, R], A]
    ) -> None:
        self._endpoint = endpoint
        self._identity = identity
        self._combine = combine

    def accumulate(self, *args: Any, **kwargs: Any) -> Future[A]:
        """Call the endpoint on every actor and fold the answers as they arrive."""
        return fold(self._endpoint, args, kwargs, self._identity, self._combine)


def send(
    endpoint: Endpoint[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    port: Port[Any] | None = None,
    selection: Literal["all", "choose"] = "all",
) -> None:
    """The primitive cast: deliver to the selected actors, answers (if any) to ``port``."""
    if selection not in ("all", "choose"):
        raise ValueError(f"selection must be 'all' or 'choose', not {selection!r}")
    endpoint._cast(
        args, kwargs, choose=selection == "choose", reply=port.ref if port is not None else None
    )
