"""Instance: one actor as its proc hosts it.

An instance owns the user's actor object, a mailbox and the task that drains
it one message at a time. It is also what ``context().actor_instance`` gives
to the code running in the actor.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import enum
import itertools
import logging
import os
import threading
import traceback
from collections import deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from danaus.core import trace as ev
from danaus.core.actor import Actor, EndpointSpec, endpoints_of
from danaus.core.context import NO_MESSAGE, Context, reset_context, set_context
from danaus.core.creators import Creator, qualified_name
from danaus.core.errors import (
    CAUSE,
    CONTEXT,
    ActorError,
    MeshStoppedError,
    MessageTooLargeError,
    SupervisionError,
    chain_link,
)
from danaus.core.owned import STOP_TIMEOUT
from danaus.core.ports import Port
from danaus.core.serialize import Buffer, dumps, loads
from danaus.core.shape import Extent, Point
from danaus.core.supervision import MeshFailure, class_path
from danaus.core.transport import ROOT
from danaus.core.undeliverable import UndeliverableMessageEnvelope
from danaus.core.wire import PLAIN_PORT, Call

if TYPE_CHECKING:
    from danaus.core.mesh import HostMesh, ProcMesh
    from danaus.core.owned import OwnedMesh
    from danaus.core.runtime import Runtime
    from danaus.core.transport import ActorRunner

log = logging.getLogger("danaus.actor")

_DANAUS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_DISPATCH_DIRS = (
    _DANAUS_DIR,
    os.path.dirname(asyncio.__file__),
    os.path.dirname(concurrent.futures.__file__),
)
"""Where the frames that dispatch a call to user code live (Danaus, asyncio, thread pools)."""


class ActorState(enum.Enum):
    """Where an actor is in its life."""

    STARTING = "starting"
    """Spawned; ``__init__`` has not finished."""
    RUNNING = "running"
    STOPPING = "stopping"
    """Finishing its queued messages before it stops."""
    STOPPED = "stopped"
    FAILED = "failed"


_TAKES_MESSAGES = (ActorState.STARTING, ActorState.RUNNING)
_SERVES = (ActorState.RUNNING, ActorState.STOPPING)
"""The states in which the message loop goes on (a tuple: reading a member off an Enum
class, once per message, costs a few times what reading a global does)."""


class InstanceKind(enum.Enum):
    """What an instance stands for."""

    USER = "user"
    """A member of an actor mesh a program spawned."""
    SYSTEM = "system"
    """A proc's or host's agent."""
    CLIENT = "client"
    """Code outside any actor on a proc (the controller's main code)."""


_LINKS = {
    CAUSE: "\nThe above exception was the direct cause of the following exception:\n\n",
    CONTEXT: "\nDuring handling of the above exception, another exception occurred:\n\n",
}


def _one_traceback(exc: BaseException) -> str:
    """One exception's traceback, from its first frame of user code (all of it if none)."""
    frames = traceback.extract_tb(exc.__traceback__)
    first_user = next(
        (i for i, f in enumerate(frames) if not f.filename.startswith(_DISPATCH_DIRS)), 0
    )
    lines = ["Traceback (most recent call last):\n"] if frames else []
    lines += traceback.format_list(frames[first_user:])
    lines += traceback.format_exception_only(type(exc), exc)
    return "".join(lines)


def remote_traceback(exc: BaseException) -> str:
    """The traceback of ``exc`` and the exceptions it chains to, as Python prints them."""
    parts: list[str] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        link, following = chain_link(current)
        parts.append(_one_traceback(current))
        if following is not None and link is not None:
            parts.append(_LINKS[link])
        current = following
    return "".join(reversed(parts))


def actor_error_payload(actor_id: str, exc: BaseException, call: str) -> list[Buffer]:
    """A pickled `ActorError` for ``exc`` and its chain, raised by the call ``call``
    (``mesh.endpoint``)."""
    return dumps(ActorError(actor_id, exc, remote_traceback(exc), call))


def member_id(mesh_id: str, name: str, index: int, incarnation: int = 0) -> str:
    """The actor id of member ``index`` of a mesh (``~n`` once its owner has restarted it)."""
    suffix = f"~{incarnation}" if incarnation else ""
    return f"{mesh_id}/{name}[{index}]{suffix}"


@dataclass(frozen=True)
class SpawnOrder:
    """Everything a proc needs to host one member of an actor mesh."""

    mesh_id: str
    name: str
    blob: list[Buffer]
    creator: Creator
    owner: tuple[str, str]
    proc_mesh: ProcMesh
    rank: Point | None = None
    """The member's position; None means the receiving agent's position in the cast."""
    incarnation: int = 0
    """How many times the owner has restarted this member (0: the first)."""


@dataclass(frozen=True)
class _Supervise:
    """A mailbox item: run ``__supervise__`` for a failure of a mesh this actor owns."""

    failure: MeshFailure


@dataclass(frozen=True)
class _Returned:
    """A mailbox item: run ``_handle_undeliverable_message`` for a message this actor sent."""

    message: UndeliverableMessageEnvelope


_Control = _Supervise | _Returned
"""What runs at an actor's next safe point, ahead of its queued messages."""


class _Mailbox:
    """A FIFO of messages drained by one task (leaner than `asyncio.Queue` on the hot path)."""

    __slots__ = ("_loop", "_waiter", "items")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.items: deque[Any] = deque()
        """The queued messages, for the draining task to pop (see `arrival`)."""
        self._waiter: asyncio.Future[None] | None = None

    def put(self, item: Any) -> None:
        self.items.append(item)
        self._wake()

    def arrival(self) -> asyncio.Future[None]:
        """A future set once something is put: the draining task awaits it while ``items`` is
        empty (a plain future, as a coroutine for each message would cost more)."""
        self._waiter = self._loop.create_future()
        return self._waiter

    def put_first(self, item: Any) -> None:
        """Queue ``item`` ahead of every message: it runs at the next safe point."""
        self.items.appendleft(item)
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)

    def __len__(self) -> int:
        return len(self.items)

    def take_all(self) -> list[Any]:
        items = list(self.items)
        self.items.clear()
        return items


class Instance:
    """A hosted actor: its identity, mailbox and state.

    A user actor's code runs on the thread of its `ActorRunner` (on the
    simulator, the world's one thread). The runtime calls `post`, `supervise`,
    `stop` and `abandon` from its loop's thread; they hand their work to the
    actor's thread, and only that thread changes the actor's state.

    Its fields are slots: a world of thousands of procs reads those of every
    actor for each message, and slots keep them in the object itself, in
    fewer lines of the CPU's caches than a dictionary of attributes would.
    """

    __slots__ = (
        "__weakref__",
        "_accepted",
        "_choices",
        "_concurrent",
        "_ending",
        "_endpoints",
        "_failure",
        "_in_async_call",
        "_inbox",
        "_inbox_woken",
        "_last_context",
        "_mailbox",
        "_obj",
        "_posted",
        "_proc_mesh",
        "_runner",
        "_running",
        "_runtime",
        "_seq",
        "_stop_reason",
        "_stopped",
        "_supervising",
        "_supervisions",
        "_task",
        "_thread",
        "actor_id",
        "class_name",
        "context",
        "creator",
        "handled",
        "key",
        "kind",
        "loop",
        "name",
        "owned",
        "owner",
        "rank",
        "state",
    )

    def __init__(
        self,
        runtime: Runtime,
        key: str,
        actor_id: str,
        name: str,
        rank: Point,
        *,
        creator: Creator | None = None,
        owner: tuple[str, str] | None = None,
        proc_mesh: ProcMesh | None = None,
        kind: InstanceKind = InstanceKind.USER,
    ) -> None:
        self._runtime = runtime
        self.owner = owner
        self.key = key
        self.actor_id = actor_id
        self.name = name
        self.rank = rank
        self.creator = creator
        self._proc_mesh = proc_mesh
        self.kind = kind
        self.class_name = "Client"
        self.context = Context(self, rank)
        self._last_context: tuple[int, tuple[str, ...], tuple[int, ...], Context] = (
            -1,
            (),
            (),
            self.context,
        )
        """The point, labels, sizes and context of the last message handled (see
        `_context_for`)."""
        self.loop = runtime.loop
        """The loop this actor's messages are handled on."""
        self._seq = itertools.count()
        self._obj: Actor | None = None
        self._endpoints: dict[str, EndpointSpec] = {}
        self._mailbox: _Mailbox | None = None
        self._task: asyncio.Task[None] | None = None
        self._runner: ActorRunner | None = None
        self._stopped: asyncio.Future[None] | None = None
        """Settles (on the runtime's loop) once the actor is gone."""
        self.state = ActorState.RUNNING
        self.owned: list[OwnedMesh] = []
        """The meshes this actor spawned and has not stopped, oldest first."""
        self._choices: dict[str, int] = {}
        self._failure: MeshFailure | None = None
        self._running: Call | None = None
        """The call being handled, if any."""
        self._in_async_call = False
        """The call being handled is an async endpoint (suspended whenever the loop runs)."""
        self._supervisions: deque[_Control] = deque()
        self._supervising: asyncio.Task[None] | None = None
        self._ending = False
        """Danaus itself is cancelling the message loop (an abandon or an exit)."""
        self.handled = 0
        """How many messages this actor has taken from its mailbox (read by `danaus top`)."""
        self._posted = 0
        """Messages posted to this actor (counted on the runtime's thread)."""
        self._inbox: deque[tuple[str, Call, list[Buffer]]] = deque()
        """Messages posted and not yet taken by the actor's thread (one wake-up per burst)."""
        self._inbox_woken = False
        """The actor's thread has been asked to take the inbox."""
        self._accepted = 0
        """Of those, how many reached its thread (counted there)."""
        self._concurrent: dict[asyncio.Task[None], Call] = {}
        """The bodies of `concurrent_endpoint` calls still running, with their calls."""
        self._thread: int | None = None
        """The id of the thread this actor's code runs on."""
        self._stop_reason: str | None = None

    @classmethod
    def client(cls, runtime: Runtime) -> Instance:
        """The instance standing for non-actor code (the controller's main code) on a proc."""
        return cls(
            runtime,
            "client",
            f"{runtime.proc_id}/client",
            "client",
            NO_MESSAGE,
            kind=InstanceKind.CLIENT,
        )

    @classmethod
    def system(cls, runtime: Runtime, key: str, actor: Actor) -> Instance:
        """A proc's or host's agent: async code only, on the runtime's loop."""
        instance = cls(
            runtime, key, f"{runtime.proc_id}/{key}", key, NO_MESSAGE, kind=InstanceKind.SYSTEM
        )
        instance._adopt_object(actor)
        instance._start(None)
        return instance

    @classmethod
    def spawn(cls, runtime: Runtime, order: SpawnOrder, rank: Point) -> Instance:
        """Host member ``rank`` of a new actor mesh; it is built before any message."""
        instance = cls(
            runtime,
            order.mesh_id,
            member_id(order.mesh_id, order.name, rank.rank, order.incarnation),
            order.name,
            rank,
            creator=order.creator,
            owner=order.owner,
            proc_mesh=order.proc_mesh,
        )
        instance.state = ActorState.STARTING
        instance._runner = runtime.world.actor_runner(instance.actor_id)
        instance.loop = instance._runner.loop
        instance._start(order.blob)
        runtime.add_actor(instance)
        runtime.trace.record(
            ev.Spawn(
                proc=runtime.proc_id,
                actor=instance.actor_id,
                mesh=order.mesh_id,
                rank=rank.rank,
                owner=order.owner[0],
                creator=order.creator.actor_id,
            )
        )
        return instance

    # ---- what code in the actor can see ------------------------------------------------

    @property
    def proc_id(self) -> str:
        return self._runtime.proc_id

    @property
    def proc(self) -> ProcMesh:
        """This actor's own proc, as a mesh of one."""
        from danaus.core.mesh import ProcMesh

        return ProcMesh.single(self._runtime.proc_id, self.host_mesh)

    @property
    def host_mesh(self) -> HostMesh:
        from danaus.core.mesh import HostMesh

        return HostMesh.single(self._runtime.host_agent)

    @property
    def proc_mesh(self) -> ProcMesh:
        """The proc mesh this actor was spawned on."""
        return self._proc_mesh if self._proc_mesh is not None else self.proc

    @property
    def is_running(self) -> bool:
        """Constructed, and neither stopping, stopped nor failed."""
        return self.state is ActorState.RUNNING

    @property
    def running_call(self) -> Call | None:
        """The message being handled now, if any."""
        return self._running

    @property
    def mailbox_depth(self) -> int:
        """How many messages wait for this actor: in its mailbox, or on the way to its thread.

        A sync endpoint that blocks the actor's thread holds back the messages
        posted meanwhile before they reach the mailbox; they count too.
        """
        queued = len(self._mailbox) if self._mailbox is not None else 0
        return queued + self._posted - self._accepted

    def enter(self) -> None:
        """Make this actor the context of the running task (for work done on its behalf)."""
        set_context(self.context)

    def next_seq(self) -> int:
        return next(self._seq)

    def choose_index(self, mesh_id: str, count: int) -> int:
        """Round-robin over a mesh's actors, per caller: what ``choose`` sends to next."""
        index = self._choices.get(mesh_id, 0)
        self._choices[mesh_id] = index + 1
        return index % count

    def as_creator(self) -> Creator:
        """This actor (or client), as the actors it spawns see their creator."""
        return Creator(
            self.actor_id, self._shown_name(), self._shown_class(), self.rank, self.creator
        )

    def _shown_name(self) -> str:
        """The controller's own code is ``root``, as in Monarch; any other, by its name."""
        client = self.kind is InstanceKind.CLIENT and self._runtime.proc_id == ROOT
        return "root" if client else self.name

    def _shown_class(self) -> str | None:
        return class_path(type(self._obj)) if self._obj is not None else None

    def __str__(self) -> str:
        """The actor named after its creators, as Monarch names it (`qualified_name`)."""
        return qualified_name(self.as_creator())

    def __repr__(self) -> str:
        return f"<Instance {self.actor_id} {self.state.value}>"

    # ---- entry points for the runtime (any thread) ------------------------------------

    def _on_actor(self, fn: Callable[..., None], *args: Any) -> None:
        """Run ``fn(*args)`` on this actor's thread: at once if its loop is the runtime's.

        Once the actor's loop takes no more work, the actor is gone; ``fn``
        then runs here and finds it so.
        """
        if self.loop is self._runtime.loop:
            fn(*args)
            return
        try:
            self.loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:
            fn(*args)

    def post(self, src: str, call: Call, payload: list[Buffer]) -> None:
        """Queue a message from proc ``src`` (from the runtime's loop).

        Messages that arrive while the actor's thread has yet to take the last
        ones join them: a burst costs that thread one wake-up. Whatever else is
        handed to the thread afterwards (`_on_actor`) still comes after them.
        """
        self._posted += 1
        if self.loop is self._runtime.loop:
            self._accept(src, call, payload)
            return
        self._inbox.append((src, call, payload))
        if not self._inbox_woken:
            self._inbox_woken = True
            self._on_actor(self._take_inbox)

    def _take_inbox(self) -> None:
        """Accept the messages posted so far (on the actor's thread, or on the runtime's
        once the actor's loop takes no more work: then both may take at once)."""
        self._inbox_woken = False
        inbox = self._inbox
        while True:
            try:
                message = inbox.popleft()
            except IndexError:
                return
            self._accept(*message)

    def supervise(self, failure: MeshFailure) -> None:
        """A mesh this actor owns has a failed member: handle it at the next safe point.

        A safe point is the next await of an async endpoint being handled now, or
        else the moment between two messages. Failures are handled one at a time.
        """
        if self.kind is InstanceKind.CLIENT:
            self._runtime.unhandled(failure)
        else:
            self._on_actor(self._offer, _Supervise(failure))

    def undeliverable(self, message: UndeliverableMessageEnvelope) -> None:
        """A message this actor sent could not be delivered (from any thread).

        An actor's ``_handle_undeliverable_message`` decides at its next safe
        point; for the controller's own code, the unhandled-fault hook does.
        """
        if self.kind is InstanceKind.CLIENT:
            failure = self._describe_failure(_undelivered(message))
            self._runtime.on_loop(self._runtime.unhandled, failure)
        else:
            self._on_actor(self._offer, _Returned(message))

    def stop(self, reason: str | None = None) -> None:
        """Stop this actor gracefully, from its own code: ``context().actor_instance.stop()``.

        The actor takes no new messages, finishes the queued ones, stops the
        meshes it owns and runs ``__cleanup__(None)``. Later messages to it are
        answered with `MeshStoppedError` (giving ``reason``). Stopping is not a
        failure: its owner is not told.
        """
        self._check_is_actor("stop")
        self._stop_reason = reason
        self._on_own_thread(self._begin_stop)

    def abort(self, reason: str | None = None) -> None:
        """Fail this actor now, from its own code: ``context().actor_instance.abort(reason)``.

        As if an endpoint had raised under ``broadcast``: the call being handled
        and the queued ones are answered with `SupervisionError`, and the owner
        gets a `MeshFailure` whose cause names ``reason``. Code after ``abort()``
        in a sync endpoint still runs to its return (its result is discarded);
        an async endpoint is cancelled at its next ``await``.
        """
        self._check_is_actor("abort")
        self._on_own_thread(self._abort, f"aborted: {reason or 'no reason provided'}")

    kill = abort

    def _check_is_actor(self, what: str) -> None:
        if self.kind is not InstanceKind.USER:
            raise RuntimeError(f"{what}() is for actors; {self.actor_id} is not an actor")

    def _on_own_thread(self, fn: Callable[..., None], *args: Any) -> None:
        """Run ``fn`` now if called from this actor's own thread, else hand it to that thread."""
        if threading.get_ident() == self._thread:
            fn(*args)
        else:
            self._on_actor(fn, *args)

    async def stop_and_wait(self, timeout: float | None = None) -> None:
        """Stop gracefully: finish queued messages, stop owned meshes, run ``__cleanup__``.

        After ``timeout`` seconds the actor is abandoned without cleanup.
        """
        self._on_actor(self._begin_stop)
        if self._stopped is None:
            return
        try:
            await asyncio.wait_for(asyncio.shield(self._stopped), timeout)
        except asyncio.TimeoutError:
            log.warning("actor %s did not stop within %s s; abandoned", self.actor_id, timeout)
            self.abandon(self._stopped_error())

    def abandon(self, reason: BaseException) -> None:
        """End at once, without cleanup; the call it was running is answered with ``reason``.

        The call is answered from here, even if the actor's thread is stuck in it.
        """
        self._ending = True
        running, self._running = self._running, None
        if running is not None:
            self._runtime.reply_error(running, reason, self)
        for task, call in list(self._concurrent.items()):
            self._runtime.reply_error(call, reason, self)
            self._on_actor(task.cancel)
        self._on_actor(self._abandon, reason)

    # ---- on the actor's thread --------------------------------------------------------

    def _adopt_object(self, obj: Actor) -> None:
        self._obj = obj
        self._endpoints = endpoints_of(type(obj))
        self.class_name = type(obj).__qualname__

    def _start(self, blob: list[Buffer] | None) -> None:
        self._mailbox = _Mailbox(self.loop)
        self._stopped = self._runtime.loop.create_future()
        self._on_actor(self._begin, blob)

    def _begin(self, blob: list[Buffer] | None) -> None:
        self._thread = threading.get_ident()
        self._task = self.loop.create_task(self._serve(blob))

    def _accept(self, src: str, call: Call, payload: list[Buffer]) -> None:
        self._accepted += 1
        if self.state in _TAKES_MESSAGES:
            assert self._mailbox is not None
            self._mailbox.put((call, payload))
        elif self.state is ActorState.FAILED:
            self._runtime.refuse(src, call, self._failure_error(), self)
        else:
            self._runtime.refuse(src, call, self._stopped_error(), self)

    def _offer(self, item: _Control) -> None:
        if self.state not in _TAKES_MESSAGES:
            return
        if self._in_async_call or self._supervising is not None:
            self._supervisions.append(item)
            if self._supervising is None:
                self._supervising = self.loop.create_task(self._supervise_all())
        else:
            assert self._mailbox is not None
            self._mailbox.put_first(item)

    def _begin_stop(self) -> None:
        if self.state in _TAKES_MESSAGES:
            self.state = ActorState.STOPPING
            assert self._mailbox is not None
            self._mailbox.put(None)

    async def _supervise_all(self) -> None:
        """Handle the failures (and returned messages) that arrived while an async endpoint
        was suspended."""
        try:
            while self._supervisions and self.state in _TAKES_MESSAGES:
                await self._control(self._supervisions.popleft())
        finally:
            self._supervising = None

    async def _control(self, item: _Control) -> None:
        if isinstance(item, _Supervise):
            await self._supervise(item.failure)
        else:
            await self._returned(item.message)

    async def _serve(self, blob: list[Buffer] | None) -> None:
        mailbox = self._mailbox
        assert mailbox is not None
        if blob is not None and not await self._construct(blob):
            return
        items = mailbox.items
        while self.state in _SERVES:
            while not items:
                await mailbox.arrival()
            item = items.popleft()
            if item is None:
                await self._finish()
                return
            handling = self._handle(*item) if isinstance(item, tuple) else self._control(item)
            del item  # kept no longer than its handling: a payload may be large
            await handling
            del handling

    async def _invoke(self, fn: Callable[..., Any], is_async: bool) -> Any:
        """Run user code; a ``sys.exit`` in it ends the whole proc, as in a real process."""
        try:
            if is_async:
                return await fn()
            if self._runner is None:  # an agent: its code does not block
                return fn()
            return await self._runner.call_sync(fn)
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else 1
            self._ending = True
            self._runtime.world.exit_proc(self._runtime, code)
            raise asyncio.CancelledError from None

    def _ours(self, exc: BaseException) -> bool:
        """``exc`` is Danaus ending the message loop (not an error of the user's code)."""
        return self._ending and isinstance(exc, asyncio.CancelledError)

    async def _construct(self, blob: list[Buffer]) -> bool:
        token = set_context(self.context)
        sites = self._runtime.world.sites
        try:
            if sites is not None and (delay := sites.delay("spawn")):
                await asyncio.sleep(delay)
            cls, args, kwargs = loads(blob)
            obj = cls.__new__(cls)
            self._adopt_object(obj)
            await self._invoke(partial(cls.__init__, obj, *args, **kwargs), is_async=False)
        except BaseException as exc:
            if self._ours(exc):
                raise
            self._fail(f"__init__ raised {_describe(exc)}", exc)
            return False
        finally:
            reset_context(token)
        if self.state is ActorState.STARTING:
            self.state = ActorState.RUNNING
        return True

    async def _handle(self, call: Call, payload: list[Buffer]) -> None:
        self._running = call
        self.handled += 1
        token = set_context(self._context_for(call))
        spec = self._endpoints.get(call.method)
        explicit = spec is not None and (
            call.plain == PLAIN_PORT if call.plain else spec.explicit_response_port
        )
        sites = self._runtime.world.sites
        observer = self._runtime.observer
        observed = observer.handling(self, call) if observer is not None else None
        raised: BaseException | None = None
        try:
            if spec is None or (spec.plain and not call.plain):
                raise AttributeError(f"{self.class_name} has no endpoint {call.method!r}")
            if sites is not None:
                sites.check_call(self.name, call.method)
            args, kwargs = loads(payload)
            if explicit:
                # An answer to a caller that is gone is dropped, as the runtime's own are.
                args = (Port(call.reply, call.point, return_undeliverable=False), *args)
            body = partial(getattr(self._obj, call.method), *args, **kwargs)
            if spec.concurrent:
                self._start_concurrent(call, body, explicit)
                await asyncio.sleep(0)  # the body starts before the next message is taken
                return
            self._in_async_call = spec.is_async
            result = await self._invoke(body, spec.is_async)
        except BaseException as exc:
            raised = exc
            if self._ours(exc):
                raise
            self._answer_error(call, explicit, exc)
        else:
            if call.reply is not None and not explicit:
                delayed = self._answer(call, result)
                if delayed is not None:
                    await delayed
        finally:
            self._running = None
            self._in_async_call = False
            reset_context(token)
            if observer is not None:
                observer.handled(observed, raised)

    def _context_for(self, call: Call) -> Context:
        """The context of this actor while it handles ``call``.

        The calls of a mesh mostly reach a member at the same point of the same
        extent each time (every broadcast does): the last message's context
        serves again then, as making a `Point` and a `Context` costs a few
        times what the comparison does. The labels and sizes are compared as
        they came: looking up their `Extent` hashes each label, which is new
        in every message. They are compared with those of the shared `Extent`,
        which every member of the mesh reads, rather than with the last
        message's own: at thousands of actors, those would be out of the CPU's
        caches by the next message.
        """
        point, labels, sizes, context = self._last_context
        if point != call.point or labels != call.labels or sizes != call.sizes:
            extent = Extent.of(call.labels, call.sizes)
            context = Context(self, Point(call.point, extent))
            self._last_context = (call.point, extent.labels, extent.sizes, context)
        return context

    def _answer(self, call: Call, result: Any) -> Coroutine[Any, Any, None] | None:
        """Send the caller of ``call`` what the endpoint returned.

        If a fault site delays replies, the answer goes once that delay has
        passed: what to await is returned (None: sent now, without the cost of
        a coroutine for every answer).
        """
        sites = self._runtime.world.sites
        if sites is not None and (delay := sites.delay("reply")):
            return self._answer_after(delay, call, result)
        self._send_answer(call, result)
        return None

    async def _answer_after(self, delay: float, call: Call, result: Any) -> None:
        await asyncio.sleep(delay)
        self._send_answer(call, result)

    def _send_answer(self, call: Call, result: Any) -> None:
        assert call.reply is not None
        try:
            frames = dumps(result, "result of %s.%s", self.class_name, call.method)
            self._runtime.check_size(frames, "the answer of %s.%s", self.class_name, call.method)
        except (TypeError, MessageTooLargeError) as exc:
            frames, error = actor_error_payload(self.actor_id, exc, self._call_name(call)), True
        else:
            error = False
        self._runtime.send_reply(self, call.reply, call.point, frames, error)

    def _call_name(self, call: Call) -> str:
        """The call as errors name it: ``mesh.endpoint``."""
        return f"{self.name}.{call.method}"

    def _answer_error(self, call: Call, explicit: bool, exc: BaseException) -> None:
        """The endpoint handling ``call`` raised ``exc``.

        An `Exception` goes to a caller waiting for the endpoint's answer, as an
        `ActorError`. Otherwise (nobody waits, the endpoint answers through an
        explicit port, or ``exc`` is not an `Exception`) the actor fails.
        """
        if isinstance(exc, Exception) and call.reply is not None and not explicit:
            payload = actor_error_payload(self.actor_id, exc, self._call_name(call))
            self._runtime.send_reply(self, call.reply, call.point, payload, True)
            return
        if not isinstance(exc, Exception):
            cause = f"endpoint {call.method} raised {_describe(exc)}"
        else:
            how = "an explicit-port" if explicit else "a broadcast"
            cause = f"endpoint {call.method} ({how} call) raised {_describe(exc)}"
        self._fail(cause, exc)
        self._runtime.reply_error(call, self._failure_error(), self)

    def _start_concurrent(self, call: Call, body: Callable[[], Any], explicit: bool) -> None:
        """Run the body of a `concurrent_endpoint` call as a task; the next message may start."""
        task = self.loop.create_task(self._run_concurrent(call, body, explicit))
        self._concurrent[task] = call
        task.add_done_callback(self._concurrent.pop)

    async def _run_concurrent(self, call: Call, body: Callable[[], Any], explicit: bool) -> None:
        try:
            result = await self._invoke(body, is_async=True)
        except asyncio.CancelledError as exc:
            # Cancelled by something other than the actor's end (which answers the caller).
            cancelled = not self._ours(exc) and self.state in _TAKES_MESSAGES
            if cancelled and call.reply is not None and not explicit:
                payload = actor_error_payload(self.actor_id, exc, self._call_name(call))
                self._runtime.send_reply(self, call.reply, call.point, payload, True)
            raise
        except BaseException as exc:
            self._answer_error(call, explicit, exc)
        else:
            if call.reply is not None and not explicit:
                delayed = self._answer(call, result)
                if delayed is not None:
                    await delayed

    async def _end_concurrent(self, reason: BaseException) -> None:
        """Cancel the `concurrent_endpoint` bodies still running; their callers get ``reason``."""
        while self._concurrent:
            running = list(self._concurrent.items())
            for task, call in running:
                self._runtime.reply_error(call, reason, self)
                task.cancel()
            await asyncio.gather(*(task for task, _ in running), return_exceptions=True)

    async def _supervise(self, failure: MeshFailure) -> None:
        """Offer ``failure`` to ``__supervise__``; unhandled, it fails this actor in turn."""
        hook = getattr(self._obj, "__supervise__", None)
        token = set_context(self.context)
        try:
            handled = False
            if hook is not None:
                handled = await self._invoke(
                    partial(hook, failure), asyncio.iscoroutinefunction(hook)
                )
            if not handled:
                cause = "a mesh it owns failed and __supervise__ did not handle it"
                self._fail(cause, chained=failure)
        except BaseException as exc:
            if self._ours(exc):
                raise
            self._fail(f"__supervise__ raised {_describe(exc)}", exc, chained=failure)
        finally:
            reset_context(token)

    async def _returned(self, message: UndeliverableMessageEnvelope) -> None:
        """Offer ``message`` to ``_handle_undeliverable_message``; unhandled, this actor fails."""
        hook = self._obj._handle_undeliverable_message  # type: ignore[union-attr]
        token = set_context(self.context)
        try:
            handled = await self._invoke(partial(hook, message), asyncio.iscoroutinefunction(hook))
            if not handled:
                self._fail(_undelivered(message))
        except BaseException as exc:
            if self._ours(exc):
                raise
            self._fail(f"_handle_undeliverable_message raised {_describe(exc)}", exc)
        finally:
            reset_context(token)

    # ---- ending ---------------------------------------------------------------------

    def _failure_error(self) -> SupervisionError:
        if self._failure is None:
            return SupervisionError(f"actor {self.actor_id} has failed")
        return SupervisionError(self._failure.report(), self._failure)

    def _stopped_error(self) -> MeshStoppedError:
        reason = f": {self._stop_reason}" if self._stop_reason else ""
        return MeshStoppedError(f"actor {self.actor_id} was stopped{reason}")

    def _describe_failure(
        self, cause: str, tb: str | None = None, chained: MeshFailure | None = None
    ) -> MeshFailure:
        """This actor's failure for ``cause``, as its owner is told of it."""
        return MeshFailure(
            mesh_name=self.name,
            mesh_id=self.key,
            rank=self.rank,
            actor_id=self.actor_id,
            proc=self._runtime.proc_id,
            host=self._runtime.host,
            pid=self._runtime.pid,
            cause=cause,
            traceback=tb,
            chained=chained,
            actor_class=class_path(type(self._obj)) if self._obj is not None else self.class_name,
        )

    def _abort(self, cause: str) -> None:
        if self.state in _TAKES_MESSAGES:
            self._fail(cause)
            self._end_running_call(self._failure_error())

    def _fail(
        self, cause: str, exc: BaseException | None = None, chained: MeshFailure | None = None
    ) -> None:
        """The actor dies: queued messages get `SupervisionError`, its owner is told.

        If it dies while an async endpoint is suspended (its ``__supervise__`` gave
        up meanwhile), that call ends now with the same error.
        """
        if self.state in (ActorState.FAILED, ActorState.STOPPED):
            return
        constructed = self.state is not ActorState.STARTING
        self.state = ActorState.FAILED
        tb = remote_traceback(exc) if exc is not None else None
        self._failure = self._describe_failure(cause, tb, chained)
        log.warning("actor %s failed: %s%s", self.actor_id, cause, f"\n{tb.rstrip()}" if tb else "")
        self._runtime.trace.record(
            ev.Fail(proc=self._runtime.proc_id, actor=self.actor_id, cause=cause)
        )
        if self._runtime.observer is not None:
            self._runtime.observer.actor_failed(self, cause)
        # The owner hears first: a caller on its proc that gets the error knows it was told.
        if self.owner is not None:
            self._runtime.send_failure(self, self.owner, self._failure)
        if self._in_async_call and asyncio.current_task() is not self._task:
            self._end_running_call(self._failure_error())
        self._drain(self._failure_error())
        self._runtime.on_loop(self._runtime.retire, self, self._failure_error())
        self.loop.create_task(self._end_failed(exc, constructed))

    def _end_running_call(self, reason: BaseException) -> None:
        """Cancel the message loop and answer the call it was handling with ``reason``."""
        self._ending = True
        if self._task is not None and not self._task.done():
            self._task.cancel()
        if self._running is not None:
            self._runtime.reply_error(self._running, reason, self)
            self._running = None

    async def _end_failed(self, exc: BaseException | None, constructed: bool) -> None:
        """After a failure: the meshes it owns stop, then ``__cleanup__(exc)`` if it was built."""
        await self._end_concurrent(self._failure_error())
        await self.stop_owned()
        if constructed:
            await self._cleanup(
                exc or SupervisionError(self._failure.cause if self._failure else "")
            )
        self._release()

    def _drain(self, error: BaseException) -> None:
        assert self._mailbox is not None
        for item in self._mailbox.take_all():
            if isinstance(item, tuple):
                self._runtime.reply_error(item[0], error, self)

    def _release(self) -> None:
        if self._runner is not None:
            self._runner.close()
        self._runtime.on_loop(self._settle_stopped)

    def _settle_stopped(self) -> None:
        if self._stopped is not None and not self._stopped.done():
            self._stopped.set_result(None)

    async def stop_owned(self, timeout: float = STOP_TIMEOUT) -> None:
        """Stop the meshes this actor spawned, newest first, each within ``timeout`` seconds."""
        self.enter()
        while self.owned:
            await self.owned.pop().stop(timeout)

    async def _cleanup(self, exc: BaseException | None) -> None:
        cleanup = getattr(self._obj, "__cleanup__", None)
        if cleanup is None:
            return
        token = set_context(self.context)
        try:
            await self._invoke(partial(cleanup, exc), asyncio.iscoroutinefunction(cleanup))
        except BaseException as err:
            if self._ours(err):
                raise
            log.exception("__cleanup__ of %s raised", self.actor_id)
        finally:
            reset_context(token)

    async def _finish(self) -> None:
        await self._end_concurrent(self._stopped_error())
        await self.stop_owned()
        await self._cleanup(None)
        self.state = ActorState.STOPPED
        self._runtime.trace.record(ev.Stop(proc=self._runtime.proc_id, actor=self.actor_id))
        self._runtime.on_loop(self._runtime.retire, self, self._stopped_error())
        self._release()

    def _abandon(self, reason: BaseException) -> None:
        self._end_running_call(reason)
        if self._mailbox is not None:
            self._drain(reason)
        if self.state is not ActorState.FAILED:
            self.state = ActorState.STOPPED
        self._runtime.on_loop(self._runtime.retire, self, reason)
        self._release()


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _undelivered(message: UndeliverableMessageEnvelope) -> str:
    return f"a message it sent to {message.dest()} could not be delivered: {message.error_msg()}"
