"""Running an actor's code: its endpoints and their answers, its concurrent endpoints, and
its hooks (``__init__``, ``__supervise__``, ``_handle_undeliverable_message``,
``__cleanup__``).

Everything here runs on the actor's thread, one message at a time, but for
`Dispatcher.drop_running` and `Dispatcher.drop_concurrent`, with which an
abandon answers the calls of an actor whose thread may be stuck.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from danaus.core.actor import Actor, EndpointSpec, endpoints_of
from danaus.core.context import Context, reset_context, set_context
from danaus.core.errors import MessageTooLargeError
from danaus.core.ports import Port
from danaus.core.remote_errors import actor_error_payload, describe
from danaus.core.serialize import Buffer, dumps, loads
from danaus.core.shape import Extent, Point
from danaus.core.spawn_order import construction
from danaus.core.supervision import MeshFailure
from danaus.core.undeliverable import UndeliverableMessageEnvelope, undelivered
from danaus.core.wire import PLAIN_PORT, Call

if TYPE_CHECKING:
    from danaus.core.instance import Instance
    from danaus.core.lifecycle import Lifecycle
    from danaus.core.transport import ActorRunner

log = logging.getLogger("danaus.actor")


@dataclass(frozen=True)
class Supervise:
    """A mailbox item: run ``__supervise__`` for a failure of a mesh this actor owns."""

    failure: MeshFailure


@dataclass(frozen=True)
class Returned:
    """A mailbox item: run ``_handle_undeliverable_message`` for a message this actor sent."""

    message: UndeliverableMessageEnvelope


Control = Supervise | Returned
"""What runs at an actor's next safe point, ahead of its queued messages."""


def _unchanging(
    payload: Sequence[Buffer],
) -> tuple[tuple[tuple[Any, ...], dict[str, Any]], bool]:
    """The arguments of a `shared_arguments` endpoint, which any proc may share."""
    return loads(payload), True


class Dispatcher:
    """Runs one actor's code for its messages and hooks, and answers its callers."""

    __slots__ = (
        "_controlling",
        "_controls",
        "_last_context",
        "concurrent",
        "ending",
        "endpoints",
        "handled",
        "in_async_call",
        "instance",
        "life",
        "obj",
        "runner",
        "running",
        "runtime",
    )

    def __init__(self, instance: Instance, life: Lifecycle, runner: ActorRunner | None) -> None:
        self.instance = instance
        self.life = life
        self.runtime = instance.runtime
        self.runner = runner
        """Runs sync code off the loop's task; None for an agent, whose code never blocks."""
        self.obj: Actor | None = None
        self.endpoints: dict[str, EndpointSpec] = {}
        self.running: Call | None = None
        """The call being handled, if any."""
        self.in_async_call = False
        """The call being handled is an async endpoint (suspended whenever the loop runs)."""
        self.concurrent: dict[asyncio.Task[None], Call] = {}
        """The bodies of `concurrent_endpoint` calls still running, with their calls."""
        self.ending = False
        """Danaus itself is cancelling the message loop (an abandon, a failure or an exit):
        a `CancelledError` then ends it rather than being the user's code's error."""
        self.handled = 0
        """How many messages this actor has taken from its mailbox (read by `danaus top`)."""
        self._controls: deque[Control] | None = None
        """Safe-point work that arrived while an async endpoint was suspended, in order
        (made for the first: few actors ever have any)."""
        self._controlling: asyncio.Task[None] | None = None
        self._last_context: tuple[int, tuple[str, ...], tuple[int, ...], Context] = (
            -1,
            (),
            (),
            instance.context,
        )
        """The point, labels, sizes and context of the last message handled (see
        `_context_for`)."""

    def adopt(self, obj: Actor) -> None:
        """Run ``obj``'s code from now on."""
        self.obj = obj
        self.endpoints = endpoints_of(type(obj))
        self.instance.class_name = type(obj).__qualname__

    async def invoke(self, fn: Callable[..., Any], is_async: bool) -> Any:
        """Run user code; a ``sys.exit`` in it ends the whole proc, as in a real process."""
        try:
            if is_async:
                return await fn()
            if self.runner is None:
                return fn()
            return await self.runner.call_sync(fn)
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else 1
            self.ending = True
            self.runtime.world.exit_proc(self.runtime, code)
            raise asyncio.CancelledError from None

    def ours(self, exc: BaseException) -> bool:
        """``exc`` is Danaus ending the message loop (not an error of the user's code)."""
        return self.ending and isinstance(exc, asyncio.CancelledError)

    async def construct(self, blob: list[Buffer]) -> bool:
        """Build the user's actor from ``blob`` (its class and arguments); False if
        ``__init__`` raised, which fails the actor."""
        token = set_context(self.instance.context)
        sites = self.runtime.world.sites
        try:
            if sites is not None and (delay := sites.delay("spawn")):
                await asyncio.sleep(delay)
            # Maybe shared with the mesh's other members (`construction`): ``partial`` copies
            # ``kwargs``, so no member's ``__init__`` gets the shared dictionary itself.
            cls, args, kwargs = self.runtime.world.decode_shared(blob, construction)
            obj = cls.__new__(cls)
            self.adopt(obj)
            await self.invoke(partial(cls.__init__, obj, *args, **kwargs), is_async=False)
        except BaseException as exc:
            if self.ours(exc):
                raise
            self.life.fail(f"__init__ raised {describe(exc)}", exc)
            return False
        finally:
            reset_context(token)
        return True

    async def handle(self, call: Call, payload: list[Buffer]) -> None:
        """Run the endpoint ``call`` names and answer its caller."""
        self.running = call
        self.handled += 1
        token = set_context(self._context_for(call))
        spec = self.endpoints.get(call.method)
        explicit = spec is not None and (
            call.plain == PLAIN_PORT if call.plain else spec.explicit_response_port
        )
        runtime = self.runtime
        sites = runtime.world.sites
        observer = runtime.observer
        observed = observer.handling(self.instance, call) if observer is not None else None
        raised: BaseException | None = None
        try:
            if spec is None or (spec.plain and not call.plain):
                raise AttributeError(f"{self.instance.class_name} has no endpoint {call.method!r}")
            if sites is not None:
                sites.check_call(self.instance.name, call.method)
            args, kwargs = (
                runtime.world.decode_shared(payload, _unchanging)
                if spec.shared_arguments
                else loads(payload)
            )
            if explicit:
                # An answer to a caller that is gone is dropped, as the runtime's own are.
                args = (Port(call.reply, call.point, return_undeliverable=False), *args)
            body = partial(getattr(self.obj, call.method), *args, **kwargs)
            if spec.concurrent:
                self._start_concurrent(call, body, explicit)
                await asyncio.sleep(0)  # the body starts before the next message is taken
                return
            self.in_async_call = spec.is_async
            result = await self.invoke(body, spec.is_async)
        except BaseException as exc:
            raised = exc
            if self.ours(exc):
                raise
            self._answer_error(call, explicit, exc)
        else:
            delayed = self._answer(call, explicit, result)
            if delayed is not None:
                await delayed
        finally:
            self.running = None
            self.in_async_call = False
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
            context = Context(self.instance, Point(call.point, extent))
            self._last_context = (call.point, extent.labels, extent.sizes, context)
        return context

    def _answer(self, call: Call, explicit: bool, result: Any) -> Coroutine[Any, Any, None] | None:
        """Send the caller of ``call`` what the endpoint returned, unless nobody waits for it
        or the endpoint answers through its own port (``explicit``).

        If a fault site delays replies, the answer goes once that delay has
        passed: what to await is returned (None: sent now, or not at all, without
        the cost of a coroutine for every answer).
        """
        if call.reply is None or explicit:
            return None
        sites = self.runtime.world.sites
        if sites is not None and (delay := sites.delay("reply")):
            return self._answer_after(delay, call, result)
        self._send_answer(call, result)
        return None

    async def _answer_after(self, delay: float, call: Call, result: Any) -> None:
        await asyncio.sleep(delay)
        self._send_answer(call, result)

    def _send_answer(self, call: Call, result: Any) -> None:
        assert call.reply is not None
        instance = self.instance
        try:
            frames = dumps(result, "result of %s.%s", instance.class_name, call.method)
            self.runtime.check_size(frames, "the answer of %s.%s", instance.class_name, call.method)
        except (TypeError, MessageTooLargeError) as exc:
            frames, error = actor_error_payload(instance.actor_id, exc, self._call_name(call)), True
        else:
            error = False
        self.runtime.send_reply(instance, call.reply, call.point, frames, error)

    def _call_name(self, call: Call) -> str:
        """The call as errors name it: ``mesh.endpoint``."""
        return f"{self.instance.name}.{call.method}"

    def _answer_error(self, call: Call, explicit: bool, exc: BaseException) -> None:
        """The endpoint handling ``call`` raised ``exc``.

        An `Exception` goes to a caller waiting for the endpoint's answer, as an
        `ActorError`. Otherwise (nobody waits, the endpoint answers through an
        explicit port, or ``exc`` is not an `Exception`) the actor fails.
        """
        if isinstance(exc, Exception) and call.reply is not None and not explicit:
            payload = actor_error_payload(self.instance.actor_id, exc, self._call_name(call))
            self.runtime.send_reply(self.instance, call.reply, call.point, payload, True)
            return
        if not isinstance(exc, Exception):
            cause = f"endpoint {call.method} raised {describe(exc)}"
        else:
            how = "an explicit-port" if explicit else "a broadcast"
            cause = f"endpoint {call.method} ({how} call) raised {describe(exc)}"
        self.life.fail(cause, exc)
        self.runtime.reply_error(call, self.life.failure_error(), self.instance)

    def drop_running(self, reason: BaseException) -> None:
        """The message loop is being ended: answer the call it handles with ``reason``."""
        self.ending = True
        running, self.running = self.running, None
        if running is not None:
            self.runtime.reply_error(running, reason, self.instance)

    def _start_concurrent(self, call: Call, body: Callable[[], Any], explicit: bool) -> None:
        """Run the body of a `concurrent_endpoint` call as a task; the next message may start."""
        task = self.instance.loop.create_task(self._run_concurrent(call, body, explicit))
        self.concurrent[task] = call
        task.add_done_callback(self.concurrent.pop)

    async def _run_concurrent(self, call: Call, body: Callable[[], Any], explicit: bool) -> None:
        try:
            result = await self.invoke(body, is_async=True)
        except asyncio.CancelledError as exc:
            # Cancelled by something other than the actor's end (which answers the caller).
            cancelled = not self.ours(exc) and self.life.takes_messages
            if cancelled and call.reply is not None and not explicit:
                payload = actor_error_payload(self.instance.actor_id, exc, self._call_name(call))
                self.runtime.send_reply(self.instance, call.reply, call.point, payload, True)
            raise
        except BaseException as exc:
            self._answer_error(call, explicit, exc)
        else:
            delayed = self._answer(call, explicit, result)
            if delayed is not None:
                await delayed

    async def end_concurrent(self, reason: BaseException) -> None:
        """Cancel the `concurrent_endpoint` bodies still running; their callers get ``reason``."""
        while self.concurrent:
            running = list(self.concurrent.items())
            for task, call in running:
                self.runtime.reply_error(call, reason, self.instance)
                task.cancel()
            await asyncio.gather(*(task for task, _ in running), return_exceptions=True)

    def drop_concurrent(self, reason: BaseException) -> None:
        """Answer the `concurrent_endpoint` calls still running with ``reason`` now, and have
        the actor's thread cancel them (any thread)."""
        for task, call in list(self.concurrent.items()):
            self.runtime.reply_error(call, reason, self.instance)
            self.life.mailbox.hand_off(task.cancel)

    def offer(self, item: Control) -> None:
        """Run ``item`` at the next safe point: the next await of an async endpoint being
        handled now, or else the moment between two messages. They run one at a time."""
        if not self.life.takes_messages:
            return
        if self.in_async_call or self._controlling is not None:
            if self._controls is None:
                self._controls = deque()
            self._controls.append(item)
            if self._controlling is None:
                self._controlling = self.instance.loop.create_task(self._run_controls())
        else:
            # Ahead of the queued messages: a failure of an owned mesh must be handled before
            # the actor serves more calls that may depend on that mesh.
            self.life.mailbox.put_first(item)

    async def _run_controls(self) -> None:
        """Run the safe-point work that arrived while an async endpoint was suspended."""
        try:
            while self._controls and self.life.takes_messages:
                await self.control(self._controls.popleft())
        finally:
            self._controlling = None

    async def control(self, item: Control) -> None:
        if isinstance(item, Supervise):
            await self._supervise(item.failure)
        else:
            await self._returned(item.message)

    async def _supervise(self, failure: MeshFailure) -> None:
        """Offer ``failure`` to ``__supervise__``; unhandled, it fails this actor in turn."""
        hook = getattr(self.obj, "__supervise__", None)
        token = set_context(self.instance.context)
        try:
            handled = False
            if hook is not None:
                handled = await self.invoke(
                    partial(hook, failure), asyncio.iscoroutinefunction(hook)
                )
            if not handled:
                cause = "a mesh it owns failed and __supervise__ did not handle it"
                self.life.fail(cause, chained=failure)
        except BaseException as exc:
            if self.ours(exc):
                raise
            self.life.fail(f"__supervise__ raised {describe(exc)}", exc, chained=failure)
        finally:
            reset_context(token)

    async def _returned(self, message: UndeliverableMessageEnvelope) -> None:
        """Offer ``message`` to ``_handle_undeliverable_message``; unhandled, this actor fails."""
        hook = self.obj._handle_undeliverable_message  # type: ignore[union-attr]
        token = set_context(self.instance.context)
        try:
            handled = await self.invoke(partial(hook, message), asyncio.iscoroutinefunction(hook))
            if not handled:
                self.life.fail(undelivered(message))
        except BaseException as exc:
            if self.ours(exc):
                raise
            self.life.fail(f"_handle_undeliverable_message raised {describe(exc)}", exc)
        finally:
            reset_context(token)

    async def cleanup(self, exc: BaseException | None) -> None:
        """Run ``__cleanup__(exc)``, if the actor has one; what it raises is logged."""
        hook = getattr(self.obj, "__cleanup__", None)
        if hook is None:
            return
        token = set_context(self.instance.context)
        try:
            await self.invoke(partial(hook, exc), asyncio.iscoroutinefunction(hook))
        except BaseException as err:
            if self.ours(err):
                raise
            log.exception("__cleanup__ of %s raised", self.instance.actor_id)
        finally:
            reset_context(token)
