"""The per-proc runtime: its actors, its ports, and routing between them and the network.

Every proc (the controller's included) has one `Runtime`. Outgoing messages are
encoded here and handed to the proc's `Transport`; incoming frames are decoded
here and routed to an actor's mailbox or to a port's handler. Calls are
numbered per pair of procs and handed on in that order (`danaus.core.ordering`);
a cast to many procs travels along a tree (`danaus.core.casting`). Sending is
thread-safe (sync endpoints and controller code may run off the loop thread);
receiving always happens on the loop thread.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from danaus.core import actor_logs
from danaus.core import trace as ev
from danaus.core.agent_refs import system_actors
from danaus.core.casting import Relays, Targets
from danaus.core.config import fault_hook
from danaus.core.errors import (
    MeshStoppedError,
    MessageTooLargeError,
    SerializationError,
    SupervisionError,
)
from danaus.core.future import Future, transfer_outcome
from danaus.core.instance import Instance, InstanceKind
from danaus.core.observer import Observer, from_settings
from danaus.core.ordering import Inbound, Outbound
from danaus.core.ports import PortHandler, ReplyHandler
from danaus.core.serialize import Buffer, dumps, loads, nbytes
from danaus.core.shape import Point, Shape
from danaus.core.spawn_order import SpawnOrder
from danaus.core.supervision import MeshFailure
from danaus.core.supervisor import Supervisor
from danaus.core.transport import ProcLoss, Transport
from danaus.core.undeliverable import UndeliverableMessageEnvelope
from danaus.core.waits import Wait
from danaus.core.wire import (
    Ack,
    Call,
    Cast,
    Envelope,
    Fail,
    FrameError,
    PortRef,
    Reply,
    Returned,
    check,
    decode,
    encode,
    rejected,
    rejected_reply,
)

if TYPE_CHECKING:
    from danaus.core.transport import World

log = logging.getLogger("danaus.runtime")

Target = tuple[str, int]
"""A message's destination: the proc, and the recipient's index in the messaged slice."""


class Runtime:
    """One proc's actors, ports and message routing.

    Its fields are slots, as `Instance`'s are: every message reads some.
    """

    __slots__ = (
        "__weakref__",
        "_actors",
        "_client",
        "_gone",
        "_held",
        "_ids",
        "_inbound",
        "_last_id",
        "_lost",
        "_outbound",
        "_ports",
        "_watched",
        "host",
        "host_agent",
        "loop",
        "max_payload",
        "observer",
        "pid",
        "proc_id",
        "relays",
        "supervisor",
        "trace",
        "transport",
        "world",
    )

    def __init__(
        self,
        world: World,
        proc_id: str,
        host: str,
        host_agent: str,
        transport: Transport,
        *,
        pid: int | None = None,
        max_payload: int | None = None,
    ) -> None:
        self.world = world
        self.loop = world.loop
        self.trace = world.trace
        self.proc_id = proc_id
        self.host = host
        self.host_agent = host_agent
        self.transport = transport
        self.max_payload = max_payload
        self._actors: dict[str, Instance] = {}
        self._gone: dict[str, BaseException] = {}
        self._held: dict[str, list[tuple[str, Call, list[Buffer]]]] = {}
        self._ports: dict[int, PortHandler] = {}
        self._lost: dict[str, ProcLoss] = {}
        self._watched: set[str] = set()
        self._outbound = Outbound()
        self._inbound: Inbound[tuple[Call, list[Buffer]]] = Inbound()
        self.relays = Relays(self)
        self._ids = itertools.count(1)
        self._last_id = 0
        self.pid = pid
        """The OS process id of this proc, where it has one of its own."""
        self.observer: Observer | None = None
        """Instrumentation told of calls and failures (`danaus.core.observer`); None: off."""
        self.observe(from_settings())
        self._client: Instance | None = None
        self.supervisor = Supervisor(self)
        actor_logs.install()

    @property
    def client(self) -> Instance:
        """The instance standing for code outside any actor here (the controller's main code).

        Made when first needed: of a world's procs, most run only actors and agents,
        and a simulated world of thousands keeps every object it makes for each.
        """
        client = self._client
        if client is None:
            client = self._client = Instance.client(self)
        return client

    def start(self, host_agent: bool = False) -> None:
        """Host the proc's agent (and, on the proc of a host's agent, that agent) and begin
        receiving."""
        for key, actor in system_actors(self, host_agent).items():
            self._actors[key] = Instance.system(self, key, actor)
        self.transport.start(self._on_frames, self._on_loss, self._on_refused, self._on_message)

    def observe(self, observer: Observer | None) -> None:
        """Report to ``observer`` from now on (None: to nobody)."""
        self.observer = observer
        if observer is not None:
            observer.attach(self)

    def new_id(self) -> str:
        """An id unique in the whole job: this proc's id and a counter."""
        return f"{self.proc_id}:{self._next_number()}"

    def _next_number(self) -> int:
        self._last_id = next(self._ids)
        return self._last_id

    def on_loop(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` on the loop thread: now if already there (or the loop is idle)."""
        # A loop that is not running yet (or any more) has no thread to hand work to: the
        # caller is the only one touching the runtime then, so it may run ``fn`` itself.
        if self.loop.is_running() and asyncio._get_running_loop() is not self.loop:
            self.loop.call_soon_threadsafe(fn, *args)
        else:
            fn(*args)

    def submit(self, coro: Coroutine[Any, Any, Any]) -> Future[Any]:
        """Run ``coro`` as a task on the loop, from any thread."""
        afut = self.loop.create_future()

        def start() -> None:
            task = self.loop.create_task(coro)
            task.add_done_callback(lambda t: transfer_outcome(t, afut))

        self.on_loop(start)
        return Future(self.loop, afut)

    def done(self, value: Any = None) -> Future[Any]:
        """A future that is already done, with ``value``: for requests with nothing left to do."""
        afut = self.loop.create_future()
        afut.set_result(value)
        return Future(self.loop, afut)

    def check_size(self, payload: Sequence[Buffer], what: str, *about: object) -> None:
        """Raise `MessageTooLargeError` if ``payload`` is over the job's ``max_message_bytes``.

        ``what % about`` names the message (formatted only then).
        """
        limit = self.world.options.max_message_bytes
        if limit is not None and (size := nbytes(payload)) > limit:
            raise MessageTooLargeError(
                f"{what % about} is {size} bytes, more than the job's max_message_bytes "
                f"({limit}); it was not sent"
            )

    def send_call(
        self,
        sender: Instance,
        targets: Sequence[Target],
        actor: str,
        method: str,
        shape: Shape,
        payload: list[Buffer],
        reply: PortRef | None,
        plain: int = 0,
        answers: ReplyHandler | None = None,
    ) -> None:
        """Send one call to ``actor`` on each target proc (a cast when there are several).

        A cast to more procs than the world's ``cast_fanout`` travels along a
        tree (`danaus.core.casting`). ``plain`` says how a method called through
        ``as_endpoint`` answers (see `Call`). ``answers`` is the handler, opened
        here for this call, that gathers its answers (at ``reply``).
        """
        labels, sizes = shape.labels, shape.ndslice.sizes
        size = nbytes(payload)
        trace = self.trace
        observer = self.observer
        carried = (
            None
            if observer is None
            else observer.call_sent(sender, actor, method, len(targets), reply)
        )
        seqs = self._outbound.numbers([proc for proc, _ in targets])
        for (proc, _), seq in zip(targets, seqs):
            if trace.enabled:
                trace.events.append(
                    ev.CallSent(
                        t=trace.clock(),
                        proc=self.proc_id,
                        src=sender.actor_id,
                        seq=seq,
                        dst=proc,
                        actor=actor,
                        method=method,
                        bytes=size,
                    )
                )
            if reply is not None:
                self.watch(proc)
        fanout = self.world.options.cast_fanout
        if len(targets) > fanout:
            call = Call(actor, method, reply, 0, labels, sizes, sender.actor_id, 0, carried, plain)
            procs, points = zip(*targets)
            self.relays.cast(call, payload, fanout, Targets(procs, points, seqs), answers)
            return
        for (proc, point), seq in zip(targets, seqs):
            envelope = Call(
                actor, method, reply, point, labels, sizes, sender.actor_id, seq, carried, plain
            )
            self.transport.send_message(proc, envelope, payload)

    def send_reply(
        self,
        sender: Instance,
        port: PortRef,
        rank: int,
        payload: list[Buffer],
        error: bool,
        returnable: bool = False,
    ) -> None:
        """Send a value (or an error) to ``port``.

        ``returnable``: user code sent it through a `Port` that wants it back if
        it cannot be delivered (the runtime's own answers never come back).
        """
        seq = sender.next_seq()
        trace = self.trace
        if trace.enabled:
            trace.events.append(
                ev.ReplySent(
                    t=trace.clock(),
                    proc=self.proc_id,
                    src=sender.actor_id,
                    seq=seq,
                    dst=port.proc,
                    port=port.port,
                    error=error,
                    bytes=nbytes(payload),
                )
            )
        self.transport.send_message(
            port.proc, Reply(port.port, rank, error, sender.actor_id, seq, returnable), payload
        )

    def send_failure(self, sender: Instance, owner: tuple[str, str], failure: MeshFailure) -> None:
        """Tell the owner of ``sender``'s mesh that ``sender`` failed."""
        proc, key = owner
        seq = sender.next_seq()
        self.trace.record(
            ev.FailureSent(proc=self.proc_id, src=sender.actor_id, seq=seq, dst=proc, failure=key)
        )
        self.transport.send_message(proc, Fail(key, sender.actor_id, seq), dumps(failure))

    def watch(self, proc: str) -> None:
        """Be told (through the supervisor and pending calls) when ``proc`` is lost.

        If it is lost already, calls waiting on it fail now.
        """
        if proc in self._lost:
            self.on_loop(self._fail_pending, self._lost[proc])
        elif proc not in self._watched:
            self._watched.add(proc)
            self.transport.watch(proc)

    def is_lost(self, proc: str) -> bool:
        return proc in self._lost

    @property
    def lost_procs(self) -> Mapping[str, ProcLoss]:
        """The procs this one learned are gone (read-only)."""
        return self._lost

    def losses(self) -> list[ProcLoss]:
        """The procs this one learned are gone, in the order it learned it."""
        return list(self._lost.values())

    def failures(self) -> list[MeshFailure]:
        """Why the actors that failed here failed (until a restart replaces them)."""
        return [
            reason.failure
            for reason in list(self._gone.values())
            if isinstance(reason, SupervisionError) and isinstance(reason.failure, MeshFailure)
        ]

    def unhandled(self, failure: MeshFailure) -> None:
        """A failure reached the root: the world's unhandled-fault hook decides (exactly once)."""
        hook = fault_hook(self.world)
        self.trace.record(
            ev.Unhandled(proc=self.proc_id, mesh=failure.mesh_id, cause=failure.cause)
        )
        try:
            hook(failure)
        except SystemExit as exit_:
            self.world.abort(exit_.code if isinstance(exit_.code, int) else 1)
        except BaseException:
            log.exception("unhandled_fault_hook raised; the controller exits")
            self.world.abort(1)

    def reply_error(self, call: Call, exc: BaseException, sender: Instance | None = None) -> None:
        """Answer ``call`` with ``exc`` if it expects an answer."""
        if call.reply is not None:
            self.send_reply(sender or self.client, call.reply, call.point, dumps(exc), error=True)

    def refuse(
        self, src: str, call: Call, exc: BaseException, actor: Instance | None = None
    ) -> None:
        """``call`` came from proc ``src`` for an actor that is gone.

        A call that expects an answer is answered with ``exc``; one that does not
        goes back to its sender as undeliverable.
        """
        if call.reply is not None:
            self.reply_error(call, exc, actor)
        else:
            dest = f"{self.proc_id}/{call.actor}.{call.method}"
            self.send_back(src, call.sender, call.seq, dest, str(exc))

    def send_back(self, src: str, sender: str, seq: int, dest: str, why: str) -> None:
        """Return a message that cannot be delivered to ``dest`` to its sender, on proc ``src``."""
        log.info("message from %s to %s is undeliverable: %s", sender, dest, why)
        message = UndeliverableMessageEnvelope(sender, dest, why)
        self.transport.send_message(src, Returned(sender, seq), dumps(message))

    def open_port(self, handler: PortHandler) -> PortRef:
        handler.table = self
        handler.port = self._next_number()
        self._ports[handler.port] = handler
        return PortRef(self.proc_id, handler.port)

    def close_port(self, port: int) -> None:
        self._ports.pop(port, None)
        if self.observer is not None:
            self.observer.port_closed(self, port)

    def waits(self) -> list[Wait]:
        """The calls that actors of this proc wait on (to name a deadlock)."""
        found = []
        for handler in self._ports.values():
            if not isinstance(handler, ReplyHandler) or handler.caller is None:
                continue
            ranks = sorted(handler.remaining)
            targets = dict.fromkeys((handler.procs[r], handler.actor) for r in ranks)
            if targets:
                found.append(Wait(handler.caller, handler.method, tuple(targets)))
        return found

    def unanswered_calls(self) -> list[list[str]]:
        """For each call still waiting for answers, the procs it waits on (read by checkers)."""
        return [
            sorted({handler.procs[rank] for rank in handler.remaining})
            for handler in self._ports.values()
            if isinstance(handler, ReplyHandler) and handler.remaining
        ]

    def spawn(self, order: SpawnOrder, rank: Point) -> Instance:
        """Host member ``rank`` of a new actor mesh, and hand it the messages that arrived
        before it."""
        instance = Instance.member(self, order, rank)
        self._actors[instance.key] = instance
        self._gone.pop(instance.key, None)
        for src, call, payload in self._held.pop(instance.key, ()):
            instance.mailbox.post(src, call, payload)
        self.trace.record(
            ev.Spawn(
                proc=self.proc_id,
                actor=instance.actor_id,
                mesh=order.mesh_id,
                rank=rank.rank,
                owner=order.owner[0],
                creator=order.creator.actor_id,
            )
        )
        return instance

    def retire(self, instance: Instance, reason: BaseException) -> None:
        """``instance`` is gone: later messages to it are answered with ``reason``."""
        if self._actors.get(instance.key) is instance:
            del self._actors[instance.key]
        self._gone[instance.key] = reason

    def actors(self) -> list[Instance]:
        """The user actors hosted here."""
        return [a for a in self._actors.values() if a.kind is InstanceKind.USER]

    def instances(self) -> list[Instance]:
        """Every instance here: the client (once code outside any actor ran here), the agents
        and the user actors."""
        actors = list(self._actors.values())
        return actors if self._client is None else [self._client, *actors]

    def _on_frames(self, src: str, frames: list[Buffer]) -> None:
        try:
            envelope, payload = decode(frames, self.max_payload)
        except FrameError as exc:
            self._rejected(src, frames, exc)
            return
        self._route(src, envelope, payload)

    def _on_message(self, src: str, envelope: Envelope, payload: list[Buffer]) -> None:
        """A message whose envelope came as an object: checked as `_on_frames` checks frames."""
        try:
            check(envelope, payload, self.max_payload)
        except FrameError as exc:
            self._rejected(src, encode(envelope, payload), exc)
            return
        self._route(src, envelope, payload)

    def _rejected(self, src: str, frames: list[Buffer], error: FrameError) -> None:
        log.error("proc %s rejected a message from %s: %s", self.proc_id, src, error)
        self._refuse(src, frames, error)

    def _route(self, src: str, envelope: Envelope, payload: list[Buffer]) -> None:
        """Hand a valid message from proc ``src`` on, by the kind of its envelope."""
        kind = envelope.__class__  # each kind of envelope is a final class
        if kind is Call:
            self._arrived(envelope.origin or src, envelope, payload)
        elif kind is Cast:
            self.relays.forward(src, envelope, payload)
            self._arrived(envelope.origin, envelope.call, payload)
        elif kind is Ack:
            self.relays.acked(src, envelope)
        elif kind is Reply:
            trace = self.trace
            if trace.enabled:
                trace.events.append(
                    ev.ReplyReceived(
                        t=trace.clock(),
                        proc=self.proc_id,
                        src=envelope.sender,
                        seq=envelope.seq,
                        port=envelope.port,
                    )
                )
            self._route_reply(src, envelope, payload)
        elif kind is Returned:
            self._route_returned(envelope, payload)
        else:
            self.trace.record(
                ev.FailureReceived(
                    proc=self.proc_id, src=envelope.sender, seq=envelope.seq, failure=envelope.owner
                )
            )
            self._route_failure(payload)

    def _on_refused(self, src: str, frames: list[Buffer], error: BaseException) -> None:
        """The transport refused a message from ``src`` (too large): its sender hears why."""
        reply = rejected_reply(frames)
        if reply is not None:  # an answer to a call of this proc's, which now fails
            handler = self._ports.get(reply.port)
            if handler is not None:
                handler.deliver(reply.rank, dumps(error), True)
            return
        self._refuse(src, frames, error)

    def _refuse(self, src: str, frames: list[Buffer], error: BaseException) -> None:
        """A call or cast from ``src`` was rejected: nobody must wait on it forever.

        Its caller hears why (``error``, or a `SerializationError` for a message
        that could not be read), for this proc and for those it was to forward
        to; calls numbered after it are not held behind it; a cast is
        acknowledged to ``src``, which keeps it until then.
        """
        found = rejected(frames, src)
        if found is None:
            return
        if found.reply is not None:
            refused = (
                error
                if isinstance(error, MessageTooLargeError)
                else SerializationError(f"proc {self.proc_id} rejected the call: {error}")
            )
            for point in found.points:
                self.send_reply(self.client, found.reply, point, dumps(refused), error=True)
        if found.seq is not None:
            self._deliver(found.origin, found.seq, None)
        if found.hop is not None:
            self.relays.rejected(src, found.hop)

    def _arrived(self, origin: str, call: Call, payload: list[Buffer]) -> None:
        """Call ``call`` from proc ``origin`` arrived, directly or along a tree."""
        if origin in self._lost:
            self._dropped(call, "its sender's proc is lost")
            return
        self._deliver(origin, call.seq, (call, payload))

    def _deliver(self, origin: str, seq: int, item: tuple[Call, list[Buffer]] | None) -> None:
        """Hand on the calls from ``origin`` that are due now that ``seq`` is here (``item``
        None: it was refused, and only its place in the order counts)."""
        due = self._inbound.take(origin, seq, item)
        if due is None:
            if item is not None:
                self._dropped(item[0], "a duplicate")
            return
        if not due and self._inbound.holding(origin):
            self.watch(origin)  # what it holds goes if the calls before never come
        trace = self.trace
        for ready, payload in due:
            if trace.enabled:
                trace.events.append(
                    ev.CallReceived(
                        t=trace.clock(),
                        proc=self.proc_id,
                        src=ready.sender,
                        seq=ready.seq,
                        actor=ready.actor,
                    )
                )
            self._route_call(origin, ready, payload)

    def _dropped(self, call: Call, why: str) -> None:
        if self.trace.enabled:
            self.trace.record(
                ev.CallDropped(proc=self.proc_id, src=call.sender, seq=call.seq, why=why)
            )

    def _route_call(self, src: str, call: Call, payload: list[Buffer]) -> None:
        instance = self._actors.get(call.actor)
        if instance is not None:
            instance.mailbox.post(src, call, payload)
        elif call.actor in self._gone:
            self.refuse(src, call, self._gone[call.actor])
        else:
            self._held.setdefault(call.actor, []).append((src, call, payload))

    def _route_reply(self, src: str, reply: Reply, payload: list[Buffer]) -> None:
        handler = self._ports.get(reply.port)
        if handler is not None:
            handler.deliver(reply.rank, payload, reply.error)
        elif reply.returnable and reply.port > self._last_id:
            dest = f"{self.proc_id}:{reply.port}"
            self.send_back(src, reply.sender, reply.seq, dest, "no such port was ever opened there")

    def _route_returned(self, returned: Returned, payload: list[Buffer]) -> None:
        try:
            message = loads(payload)
        except Exception as exc:
            log.error("proc %s could not read a returned message: %r", self.proc_id, exc)
            return
        sender = next((i for i in self.instances() if i.actor_id == returned.sender), None)
        if sender is None or not isinstance(message, UndeliverableMessageEnvelope):
            log.warning("undeliverable message for %s, which is gone: %r", returned.sender, message)
            return
        sender.undeliverable(message)

    def _route_failure(self, payload: list[Buffer]) -> None:
        try:
            failure = loads(payload)
        except Exception as exc:
            log.error("proc %s could not read a failure report: %r", self.proc_id, exc)
            return
        if isinstance(failure, MeshFailure):
            self.supervisor.on_failure(failure)

    def _on_loss(self, loss: ProcLoss) -> None:
        if loss.proc in self._lost:
            return
        self._lost[loss.proc] = loss
        self.trace.record(ev.Lost(proc=self.proc_id, peer=loss.proc, reason=loss.reason))
        self._outbound.forget(loss.proc)
        self._inbound.forget(loss.proc)
        self.relays.lost(loss.proc)
        self._fail_pending(loss)
        self.supervisor.on_loss(loss)

    def _fail_pending(self, loss: ProcLoss) -> None:
        """Every reply still expected from ``loss.proc`` becomes a `SupervisionError` (a
        `MeshStoppedError` if the proc was stopped)."""
        kind = MeshStoppedError if loss.stopped else SupervisionError
        error = kind(loss.describe(), failure=loss)
        for handler in list(self._ports.values()):
            if isinstance(handler, ReplyHandler) and handler.cast is not None:
                self.relays.resend(handler.cast, loss.proc)
            handler.lost(loss.proc, error)

    async def stop_actors(self, keys: Sequence[str] | None, timeout: float | None) -> None:
        """Stop the given actors (None: all user actors) gracefully, within ``timeout``."""
        targets = [a for a in self.actors() if keys is None or a.key in keys]
        await asyncio.gather(*(a.stop_and_wait(timeout) for a in targets))

    def close(self) -> None:
        for instance in list(self._actors.values()):
            instance.abandon(MeshStoppedError(f"proc {self.proc_id} is shutting down"))
        self.relays.close()
        self.transport.close()
