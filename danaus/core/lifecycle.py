"""Where an actor is in its life: its states, the one way they change, and how it ends.

`TRANSITIONS` is the whole state machine: from each state, the states an
actor may go to. `Lifecycle.transition` is the only code that changes an
actor's state, and it refuses any change the table does not list, so the
verbs below say what they want and let the table decide (a failed actor that
is abandoned stays failed; a stop asked of a stopping actor does nothing).

An actor ends in one of three ways, all on its own thread:

* stopped: `request_stop` queues a marker behind the queued messages; when
  the message loop reaches it, `wind_down` ends the actor (`__cleanup__(None)`).
* failed: `fail` refuses the queued messages at once and tells the owner,
  then `wind_down` runs (`__cleanup__(exc)`).
* abandoned: `abandon` answers what the actor runs and queues, and ends it
  without cleanup; what the actor's code does afterwards is not waited for.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING

from danaus.core import trace as ev
from danaus.core.dispatch import Dispatcher
from danaus.core.errors import MeshStoppedError, SupervisionError
from danaus.core.mailbox import Mailbox
from danaus.core.remote_errors import remote_traceback
from danaus.core.serialize import Buffer
from danaus.core.supervision import MeshFailure, class_path
from danaus.core.wire import Call

if TYPE_CHECKING:
    from danaus.core.instance import Instance
    from danaus.core.transport import ActorRunner

log = logging.getLogger("danaus.actor")


class ActorState(enum.Enum):
    """Where an actor is in its life."""

    STARTING = "starting"
    """Spawned; ``__init__`` has not finished."""
    RUNNING = "running"
    STOPPING = "stopping"
    """Finishing its queued messages before it stops."""
    STOPPED = "stopped"
    FAILED = "failed"


STARTING, RUNNING, STOPPING, STOPPED, FAILED = ActorState

TRANSITIONS: Mapping[ActorState, frozenset[ActorState]] = {
    STARTING: frozenset({RUNNING, STOPPING, STOPPED, FAILED}),
    RUNNING: frozenset({STOPPING, STOPPED, FAILED}),
    STOPPING: frozenset({STOPPED, FAILED}),
    STOPPED: frozenset(),
    FAILED: frozenset(),
}
"""The states an actor may go to from each: it fails or is abandoned (``STOPPED``) from
any state it lives in, and a stopping actor may still fail while it finishes its queue."""

TAKES_MESSAGES = (STARTING, RUNNING)
"""The states in which new messages are queued rather than refused."""
SERVES = (RUNNING, STOPPING)
"""The states in which the message loop goes on (tuples: reading a member off an Enum
class, once per message, costs a few times what reading a global does)."""


class Lifecycle:
    """One actor's state, its message loop, and the verbs that end it.

    It makes the actor's `Mailbox` and `Dispatcher`; what runs on the actor's
    thread is marked so below, the rest may run on the runtime's.
    """

    __slots__ = (
        "dispatch",
        "failure",
        "instance",
        "mailbox",
        "runtime",
        "state",
        "stop_reason",
        "stopped",
        "task",
    )

    def __init__(
        self, instance: Instance, state: ActorState, runner: ActorRunner | None = None
    ) -> None:
        self.instance = instance
        self.runtime = instance.runtime
        self.state = state
        self.mailbox = Mailbox(instance.runtime.loop, instance.loop, self.accept)
        self.dispatch = Dispatcher(instance, self, runner)
        self.failure: MeshFailure | None = None
        self.stop_reason: str | None = None
        self.stopped: asyncio.Future[None] | None = None
        """Settles (on the runtime's loop) once the actor is gone."""
        self.task: asyncio.Task[None] | None = None
        """The message loop, on the actor's loop."""

    @property
    def takes_messages(self) -> bool:
        """New messages are queued, not refused: the actor is starting or running."""
        return self.state in TAKES_MESSAGES

    def transition(self, to: ActorState) -> bool:
        """Go to state ``to`` if `TRANSITIONS` allows it from here; False, and no change, if not."""
        if to not in TRANSITIONS[self.state]:
            return False
        self.state = to
        return True

    def start(self, blob: list[Buffer] | None) -> None:
        """Start the message loop; ``blob``, if given, is built into the actor first."""
        self.stopped = self.runtime.loop.create_future()
        self.mailbox.hand_off(self._begin, blob)

    def _begin(self, blob: list[Buffer] | None) -> None:
        self.mailbox.thread = threading.get_ident()
        self.task = self.instance.loop.create_task(self.serve(blob))

    async def serve(self, blob: list[Buffer] | None) -> None:
        """The message loop (actor's thread): one message at a time, until the actor ends."""
        mailbox = self.mailbox
        dispatch = self.dispatch
        if blob is not None:
            if not await dispatch.construct(blob):
                return
            # Refused if a stop came during __init__: the actor is stopping, and the loop
            # below serves the messages queued before the stop's marker, then ends.
            self.transition(RUNNING)
        items = mailbox.items
        handle = dispatch.handle
        control = dispatch.control
        while self.state in SERVES:
            while not items:
                await mailbox.arrival()
            item = items.popleft()
            if item is None:  # the marker `request_stop` queued: every message before it is done
                await self.wind_down(self.stopped_error(), cleanup=True)
                return
            handling = handle(*item) if isinstance(item, tuple) else control(item)
            del item  # kept no longer than its handling: a payload may be large
            await handling
            del handling

    def accept(self, src: str, call: Call, payload: list[Buffer]) -> None:
        """A message from proc ``src`` reached the actor's thread: queue it, or refuse it if
        the actor takes no more."""
        state = self.state
        if state in TAKES_MESSAGES:
            self.mailbox.put((call, payload))
        elif state is FAILED:
            self.runtime.refuse(src, call, self.failure_error(), self.instance)
        else:
            self.runtime.refuse(src, call, self.stopped_error(), self.instance)

    def stop(self, reason: str | None) -> None:
        """Stop gracefully, asked by the actor's own code (see `Instance.stop`)."""
        self.stop_reason = reason
        self.mailbox.on_own_thread(self.request_stop)

    def request_stop(self) -> None:
        """Take no new messages; the queued ones run, then the actor winds down (actor's
        thread)."""
        if self.transition(STOPPING):
            self.mailbox.put(None)

    def abort(self, cause: str) -> None:
        """Fail now, ending the call being handled (actor's thread; see `Instance.abort`)."""
        if self.state in TAKES_MESSAGES:
            self.fail(cause)
            self.interrupt(self.failure_error())

    def fail(
        self, cause: str, exc: BaseException | None = None, chained: MeshFailure | None = None
    ) -> None:
        """The actor dies (actor's thread): queued messages get `SupervisionError`, its owner
        is told, and it winds down.

        If it dies while an async endpoint is suspended (its ``__supervise__`` gave
        up meanwhile), that call ends now with the same error.
        """
        constructed = self.state is not STARTING
        if not self.transition(FAILED):
            return
        instance, runtime = self.instance, self.runtime
        tb = remote_traceback(exc) if exc is not None else None
        failure = self.failure = self.describe_failure(cause, tb, chained)
        log.warning(
            "actor %s failed: %s%s", instance.actor_id, cause, f"\n{tb.rstrip()}" if tb else ""
        )
        runtime.trace.record(ev.Fail(proc=runtime.proc_id, actor=instance.actor_id, cause=cause))
        if runtime.observer is not None:
            runtime.observer.actor_failed(instance, cause)
        # The owner hears first: a caller on its proc that gets the error knows it was told.
        if instance.owner is not None:
            runtime.send_failure(instance, instance.owner, failure)
        error = self.failure_error()
        # A failure from another task (a failure handled while an async endpoint is
        # suspended) ends that endpoint now. One raised by the message loop's own task is
        # already ending its call, and cancelling that task would cancel the wind-down too.
        if self.dispatch.in_async_call and asyncio.current_task() is not self.task:
            self.interrupt(error)
        self.refuse_queued(error)
        runtime.on_loop(runtime.retire, instance, error)
        cleanup_exc = exc or SupervisionError(cause)
        instance.loop.create_task(self.wind_down(error, cleanup=constructed, exc=cleanup_exc))

    def interrupt(self, reason: BaseException) -> None:
        """Cancel the message loop and answer the call it was handling with ``reason``."""
        self.dispatch.drop_running(reason)
        task = self.task
        if task is not None and not task.done():
            task.cancel()

    def refuse_queued(self, error: BaseException) -> None:
        """Answer every queued message with ``error``."""
        for item in self.mailbox.take_all():
            if isinstance(item, tuple):
                self.runtime.reply_error(item[0], error, self.instance)

    async def wind_down(
        self, error: BaseException, cleanup: bool, exc: BaseException | None = None
    ) -> None:
        """End the actor (actor's thread): its concurrent calls get ``error``, the meshes it
        owns stop, ``__cleanup__(exc)`` runs if ``cleanup``, then it is released. A stopping
        actor becomes stopped here; a failed one stays failed."""
        await self.dispatch.end_concurrent(error)
        await self.instance.stop_owned()
        if cleanup:
            await self.dispatch.cleanup(exc)
        if self.transition(STOPPED):
            runtime = self.runtime
            runtime.trace.record(ev.Stop(proc=runtime.proc_id, actor=self.instance.actor_id))
            runtime.on_loop(runtime.retire, self.instance, error)
        self.release()

    def release(self) -> None:
        """The actor is gone: its thread may end, and `stop_and_wait` returns."""
        runner = self.dispatch.runner
        if runner is not None:
            runner.close()
        self.runtime.on_loop(_settle, self.stopped)

    async def stop_and_wait(self, timeout: float | None) -> None:
        """Stop gracefully (from the runtime's thread); abandon the actor after ``timeout``."""
        self.mailbox.hand_off(self.request_stop)
        if self.stopped is None:
            return
        try:
            # Shielded: a timeout here must not cancel `stopped`, which others wait on and
            # which the actor's own wind-down settles.
            await asyncio.wait_for(asyncio.shield(self.stopped), timeout)
        except asyncio.TimeoutError:
            actor = self.instance.actor_id
            log.warning("actor %s did not stop within %s s; abandoned", actor, timeout)
            self.abandon(self.stopped_error())

    def abandon(self, reason: BaseException) -> None:
        """End at once, without cleanup (any thread); what it runs and queues gets ``reason``.

        The calls it runs are answered from here, even if the actor's thread is
        stuck in one; the rest happens on that thread when it next gets to it.
        """
        # The callers are answered from this thread first: the actor's thread may be stuck in
        # the very call, and an abandon exists so that they need not wait for it.
        self.dispatch.drop_running(reason)
        self.dispatch.drop_concurrent(reason)
        self.mailbox.hand_off(self._end_abandoned, reason)

    def _end_abandoned(self, reason: BaseException) -> None:
        self.interrupt(reason)
        self.refuse_queued(reason)
        self.transition(STOPPED)
        self.runtime.on_loop(self.runtime.retire, self.instance, reason)
        self.release()

    def failure_error(self) -> SupervisionError:
        if self.failure is None:
            return SupervisionError(f"actor {self.instance.actor_id} has failed")
        return SupervisionError(self.failure.report(), self.failure)

    def stopped_error(self) -> MeshStoppedError:
        reason = f": {self.stop_reason}" if self.stop_reason else ""
        return MeshStoppedError(f"actor {self.instance.actor_id} was stopped{reason}")

    def describe_failure(
        self, cause: str, tb: str | None = None, chained: MeshFailure | None = None
    ) -> MeshFailure:
        """This actor's failure for ``cause``, as its owner is told of it."""
        instance, runtime = self.instance, self.runtime
        obj = self.dispatch.obj
        return MeshFailure(
            mesh_name=instance.name,
            mesh_id=instance.key,
            rank=instance.rank,
            actor_id=instance.actor_id,
            proc=runtime.proc_id,
            host=runtime.host,
            pid=runtime.pid,
            cause=cause,
            traceback=tb,
            chained=chained,
            actor_class=class_path(type(obj)) if obj is not None else instance.class_name,
        )


def _settle(stopped: asyncio.Future[None] | None) -> None:
    if stopped is not None and not stopped.done():
        stopped.set_result(None)
