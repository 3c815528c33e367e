"""Ports: where replies and user messages arrive.

A port lives on the proc that opened it; a `PortRef` names it anywhere. Each
adverb opens a port with a handler that knows what to make of what arrives
(a ValueMesh for ``call``, a stream of futures for ``stream``...). Users open
their own with `Channel.open`.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from danaus.core.blocking import discard_outcome
from danaus.core.context import context
from danaus.core.errors import MeshStoppedError, SerializationError, SupervisionError
from danaus.core.future import Future, new_future
from danaus.core.serialize import Buffer, dumps, loads
from danaus.core.shape import Shape
from danaus.core.transport import ProcLoss
from danaus.core.value_mesh import ValueMesh
from danaus.core.wire import PortRef

if TYPE_CHECKING:
    from danaus.core.casting import Answered
    from danaus.core.instance import Instance

R = TypeVar("R")
A = TypeVar("A")


def _settle(
    afut: asyncio.Future[Any], value: Any = None, error: BaseException | None = None
) -> None:
    """Settle an answer's future. A call that ended because its mesh was stopped is no
    news if nobody reads it (stopping is not a failure): asyncio is not to log it as an
    exception never retrieved, as it would when the caller dropped the future."""
    if afut.done():
        return
    if error is not None:
        afut.set_exception(error)
        if isinstance(error, MeshStoppedError):
            discard_outcome(afut)
    else:
        afut.set_result(value)


class PortTable(Protocol):
    """Where a port is open: what its handler needs of its proc's runtime."""

    def close_port(self, port: int) -> None: ...


class PortHandler:
    """Receives what arrives at one port; runs on the owning proc's loop thread."""

    port: int
    table: PortTable
    """Where the port is open (set when it is opened)."""

    def deliver(self, rank: int, payload: list[Buffer], error: bool) -> None:
        raise NotImplementedError

    def lost(self, proc: str, error: SupervisionError) -> None:
        """``proc`` is gone: fail whatever this port still waits for from it."""

    def close(self) -> None:
        self.table.close_port(self.port)


def _a_port_message() -> str:
    return "a message sent to a port"


def decode(
    payload: list[Buffer], error: bool, what: Callable[..., str], *about: Any
) -> tuple[Any, BaseException | None]:
    """The value in a reply, or the exception it carries.

    A payload that cannot be unpickled here (its class cannot be imported, say)
    becomes a `SerializationError` naming ``what(*about)`` arrived, chained to the
    cause (``what`` is called only then: most payloads unpickle, and a partial made
    for each reply would cost more than its call).
    """
    try:
        value = loads(payload)
    except Exception as exc:
        failed = SerializationError(
            f"{what(*about)} could not be unpickled here: {type(exc).__name__}: {exc}"
        )
        failed.__cause__ = exc
        return None, failed
    if error:
        return None, value if isinstance(value, BaseException) else RuntimeError(repr(value))
    return value, None


class ReplyHandler(PortHandler):
    """Waits for one reply from each of a known list of procs (one per messaged rank)."""

    caller: Instance | None = None
    """The actor that made the call (it waits for these replies)."""
    actor = ""
    """The key of the called actors on their procs."""
    method = ""
    mesh_name = ""
    """The name of the called actors' mesh (for errors)."""
    actor_class = ""
    """The called actors' class (for errors)."""
    shape: Shape | None = None
    """Where the called actors are in the messaged mesh, rank by rank (for errors)."""
    cast: Answered | None = None
    """The call, if it went along a tree: kept until every proc answered or was lost, even
    once the caller has its result (`danaus.core.casting`)."""

    def __init__(self, procs: Sequence[str]) -> None:
        self.procs = procs
        self.remaining = set(range(len(procs)))

    def deliver(self, rank: int, payload: list[Buffer], error: bool) -> None:
        if self.cast is not None:
            self.cast.pending.discard(rank)
        if rank in self.remaining:
            self.remaining.discard(rank)
            value, exc = decode(payload, error, self._describe, rank)
            self.arrived(rank, value, exc)
        self._close_when_done()

    def _describe(self, rank: int) -> str:
        """What the answer of ``rank`` is, for an error about it."""
        return f"the answer of {self.method or 'a call'} from proc {self.procs[rank]}"

    def lost(self, proc: str, error: SupervisionError) -> None:
        for rank in sorted(r for r in self.remaining if self.procs[r] == proc):
            self.remaining.discard(rank)
            self.arrived(rank, None, self._lost_error(rank, proc, error))
        if self.cast is not None:
            self.cast.pending.difference_update(
                [rank for rank, there in enumerate(self.procs) if there == proc]
            )
        self._close_when_done()

    def _lost_error(self, rank: int, proc: str, error: SupervisionError) -> SupervisionError:
        """What the call's caller gets for ``rank``, on ``proc``, which is lost: the actor is
        named as failure reports name it (class, mesh, point), as Monarch names it."""
        if not self.mesh_name or not isinstance(error.failure, ProcLoss) or error.failure.stopped:
            return error
        point = str(self.shape.point(rank)) if self.shape and self.shape.labels else ""
        actor = f"{self.mesh_name}{point}"
        if self.actor_class:
            actor = f"{self.actor_class} {actor}"
        return SupervisionError(
            f"Endpoint call {self.mesh_name}.{self.method}() failed, The actor {actor} on proc "
            f"{proc} and all its descendants have failed: {error.failure.actor_cause()} "
            f"({error.failure.where()})",
            error.failure,
        )

    def _close_when_done(self) -> None:
        if not self.remaining and (self.cast is None or not self.cast.pending):
            self.close()

    def arrived(self, rank: int, value: Any, exc: BaseException | None) -> None:
        raise NotImplementedError


class GatherHandler(ReplyHandler):
    """``call``: a ValueMesh of every reply, or the first error."""

    def __init__(self, procs: Sequence[str], shape: Shape, afut: asyncio.Future[Any]) -> None:
        super().__init__(procs)
        self.shape = shape
        self.afut = afut
        self.values: list[Any] = [None] * len(procs)

    def arrived(self, rank: int, value: Any, exc: BaseException | None) -> None:
        if exc is not None:
            _settle(self.afut, error=exc)
            self.remaining.clear()
            return
        self.values[rank] = value
        if not self.remaining:
            _settle(self.afut, ValueMesh(self.shape, self.values))


class FirstHandler(ReplyHandler):
    """``call_one`` and ``choose``: the single reply."""

    def __init__(self, procs: Sequence[str], afut: asyncio.Future[Any]) -> None:
        super().__init__(procs)
        self.afut = afut

    def arrived(self, rank: int, value: Any, exc: BaseException | None) -> None:
        _settle(self.afut, value, exc)


class StreamHandler(ReplyHandler):
    """``stream``: the k-th future settles with the k-th reply to arrive."""

    def __init__(self, procs: Sequence[str], afuts: list[asyncio.Future[Any]]) -> None:
        super().__init__(procs)
        self.afuts = deque(afuts)

    def arrived(self, rank: int, value: Any, exc: BaseException | None) -> None:
        _settle(self.afuts.popleft(), value, exc)


class OutcomesHandler(ReplyHandler):
    """Every answer or error, by rank, once all are in: for a caller that must hear from
    every member whatever happened to the others (a stop)."""

    def __init__(self, procs: Sequence[str], afut: asyncio.Future[Any]) -> None:
        super().__init__(procs)
        self.afut = afut
        self.outcomes: list[Any] = [None] * len(procs)

    def arrived(self, rank: int, value: Any, exc: BaseException | None) -> None:
        self.outcomes[rank] = value if exc is None else exc
        if not self.remaining:
            _settle(self.afut, self.outcomes)


class FoldHandler(ReplyHandler):
    """``Accumulator``: fold every reply into one value."""

    def __init__(
        self,
        procs: Sequence[str],
        afut: asyncio.Future[Any],
        identity: Any,
        combine: Callable[[Any, Any], Any],
    ) -> None:
        super().__init__(procs)
        self.afut = afut
        self.acc = identity
        self.combine = combine

    def arrived(self, rank: int, value: Any, exc: BaseException | None) -> None:
        if exc is None:
            try:
                self.acc = self.combine(self.acc, value)
            except BaseException as err:  # user code: it must not stop the loop that runs it
                exc = err
        if exc is not None:
            _settle(self.afut, error=exc)
            self.remaining.clear()
        elif not self.remaining:
            _settle(self.afut, self.acc)


class QueueHandler(PortHandler):
    """A user `Channel`: messages queue until received.

    Messages that arrive while nobody waits are queued as they came, and
    unpickled by whoever receives them, on the receiver's thread: an actor that
    falls behind a flood of messages leaves the work of reading them to its own
    thread, not to the proc's loop, which every actor of the proc shares. A
    receiver that finds a message queued takes it without going through the
    loop; one that finds none leaves a future for the loop to settle.
    """

    def __init__(self, once: bool) -> None:
        self.once = once
        self._lock = threading.Lock()
        """Guards the queue and the waiters: the loop's thread delivers, receivers take."""
        self._queue: deque[tuple[int, list[Buffer], bool]] = deque()
        self._waiters: deque[tuple[asyncio.Future[Any], bool]] = deque()

    def deliver(self, rank: int, payload: list[Buffer], error: bool) -> None:
        with self._lock:
            while self._waiters and self._waiters[0][0].done():
                self._waiters.popleft()
            waiter = self._waiters.popleft() if self._waiters else None
            if waiter is None:
                self._queue.append((rank, payload, error))
        # Decoded outside the lock: unpickling may take long, or wait for another thread's
        # import (`danaus.core.imports`), and receivers on other threads need the lock only
        # to look at the queue.
        if waiter is not None:
            _hand_over(*waiter, rank, *decode(payload, error, _a_port_message))
        if self.once:
            self.close()

    def take_or_wait(self, afut: asyncio.Future[Any], ranked: bool) -> None:
        """Settle ``afut`` with the next message (``ranked``: as ``(sender's rank, value)``):
        now, on the caller's thread, if one is queued, else once one arrives.

        Settling a future that was made for this call, before anyone could add a
        callback to it, needs nothing of its loop, so any thread may do it.
        """
        with self._lock:
            item = self._queue.popleft() if self._queue else None
            if item is None:
                self._waiters.append((afut, ranked))
        if item is not None:
            rank, payload, error = item
            _hand_over(afut, ranked, rank, *decode(payload, error, _a_port_message))


def _hand_over(
    afut: asyncio.Future[Any], ranked: bool, rank: int, value: Any, exc: BaseException | None
) -> None:
    _settle(afut, (rank, value) if ranked and exc is None else value, exc)


class Port(Generic[R]):
    """Where to send values: picklable, so it can travel in messages to any actor.

    ``send`` and ``exception`` work from wherever the port was passed to.
    """

    def __init__(
        self, ref: PortRef | None, rank: int | None = None, return_undeliverable: bool = True
    ) -> None:
        self._ref = ref
        self._rank = rank
        self._return_undeliverable = return_undeliverable

    @property
    def return_undeliverable(self) -> bool:
        """Whether a value sent to a port that was never opened comes back (default True).

        It then goes to the sending actor's ``_handle_undeliverable_message``
        (see `Actor`), whose default fails the actor. Set it to False to drop such
        values instead. The setting travels with the port. Values for a port its
        receiver has closed, or on a proc that is lost, are dropped either way.
        """
        return self._return_undeliverable

    @return_undeliverable.setter
    def return_undeliverable(self, value: bool) -> None:
        self._return_undeliverable = bool(value)

    @property
    def ref(self) -> PortRef | None:
        """Where values sent to this port go (None: nowhere)."""
        return self._ref

    def send(self, value: R) -> None:
        """Send ``value`` to the port's receiver.

        Raises `MessageTooLargeError` if it pickles to more than the job's
        ``max_message_bytes``.
        """
        self._post(dumps(value, "value sent to a port"), error=False)

    def exception(self, exc: BaseException) -> None:
        """Make the receiver's ``recv`` raise ``exc``."""
        self._post(dumps(exc, "exception sent to a port"), error=True)

    def _post(self, payload: list[Buffer], error: bool) -> None:
        if self._ref is None:
            return
        ctx = context()
        rank = self._rank if self._rank is not None else ctx.message_rank.rank
        runtime = ctx.actor_instance.runtime
        runtime.check_size(payload, "a value sent to a port")
        runtime.send_reply(
            ctx.actor_instance, self._ref, rank, payload, error, self._return_undeliverable
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (Port, (self._ref, self._rank, self._return_undeliverable))

    def __repr__(self) -> str:
        return f"Port({self._ref})"


class PortReceiver(Generic[R]):
    """The receiving end of a `Channel`, on the proc that opened it."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, handler: QueueHandler, ranked: bool = False
    ) -> None:
        self._loop = loop
        self._handler = handler
        self._ranked = ranked

    def recv(self) -> Future[R]:
        """A future of the next value (raises if the sender sent an exception)."""
        afut, future = new_future(self._loop)
        self._handler.take_or_wait(afut, self._ranked)
        return future

    def ranked(self) -> PortReceiver[tuple[int, Any]]:
        """A receiver of the same port whose values arrive as ``(rank, value)``.

        ``rank`` is the sender's position in the slice it was messaged as (0 for
        code outside an actor). Both receivers take from one queue.
        """
        return PortReceiver(self._loop, self._handler, ranked=True)

    def __reduce__(self) -> Any:
        raise TypeError("a PortReceiver stays on the proc that opened it; pass its Port instead")


class Channel(Generic[R]):
    """Opens ports: ``port, receiver = Channel.open()``."""

    @staticmethod
    def open(once: bool = False) -> tuple[Port[R], PortReceiver[R]]:
        """A new port and its receiver. With ``once``, the port takes one message."""
        runtime = context().actor_instance.runtime
        handler = QueueHandler(once)
        ref = runtime.open_port(handler)
        return Port(ref), PortReceiver(runtime.loop, handler)

    @staticmethod
    def open_ranked(once: bool = False) -> tuple[Port[R], PortReceiver[tuple[int, R]]]:
        """Like `open`, but each value arrives as ``(rank, value)``, rank being the sender's."""
        port, receiver = Channel.open(once)
        return port, receiver.ranked()
