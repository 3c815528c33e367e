"""Instance: one actor as its proc hosts it, and as its own code sees it.

An instance is the actor's identity (its ids, name, rank, creator and owner)
and what ``context().actor_instance`` gives the code running in it. Its life
is a `Lifecycle` (states, the message loop, how it ends), which holds its
`Mailbox` (messages on their way to its thread) and its `Dispatcher` (its code
run for each message). The runtime uses the instance's `mailbox` to post
messages, and the verbs below for the rest.
"""

from __future__ import annotations

import enum
import itertools
from typing import TYPE_CHECKING

from danaus.core.context import NO_MESSAGE, Context, set_context
from danaus.core.creators import Creator, qualified_name
from danaus.core.dispatch import Returned, Supervise
from danaus.core.lifecycle import RUNNING, STARTING, ActorState, Lifecycle
from danaus.core.mesh import HostMesh, ProcMesh
from danaus.core.owned import STOP_TIMEOUT
from danaus.core.shape import Point
from danaus.core.spawn_order import SpawnOrder, member_id
from danaus.core.supervision import MeshFailure, class_path
from danaus.core.transport import ROOT
from danaus.core.undeliverable import UndeliverableMessageEnvelope, undelivered
from danaus.core.wire import Call

if TYPE_CHECKING:
    from danaus.core.actor import Actor
    from danaus.core.owned import OwnedMesh
    from danaus.core.runtime import Runtime
    from danaus.core.transport import ActorRunner


class InstanceKind(enum.Enum):
    """What an instance stands for."""

    USER = "user"
    """A member of an actor mesh a program spawned."""
    SYSTEM = "system"
    """A proc's or host's agent."""
    CLIENT = "client"
    """Code outside any actor on a proc (the controller's main code)."""


class Instance:
    """A hosted actor: its identity, its context, and the verbs that end it.

    A user actor's code runs on the thread of its `ActorRunner` (on the
    simulator, the world's one thread). The runtime calls `supervise`,
    `undeliverable`, `stop_and_wait` and `abandon` from its loop's thread;
    they hand their work to the actor's thread, and only that thread changes
    the actor's state.

    Its fields are slots, as are those of its parts: a world of thousands of
    procs reads some for each message, and slots keep them in the object
    itself, in fewer lines of the CPU's caches than a dictionary would.
    """

    __slots__ = (
        "__weakref__",
        "_choices",
        "_proc_mesh",
        "_seq",
        "actor_id",
        "class_name",
        "context",
        "creator",
        "dispatch",
        "key",
        "kind",
        "life",
        "loop",
        "mailbox",
        "name",
        "owned",
        "owner",
        "rank",
        "runtime",
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
        runner: ActorRunner | None = None,
        state: ActorState = RUNNING,
    ) -> None:
        self.runtime = runtime
        """The runtime of the proc hosting this actor."""
        self.owner = owner
        """The proc and key of the actor that spawned this one's mesh (None: no owner)."""
        self.key = key
        self.actor_id = actor_id
        self.name = name
        self.rank = rank
        self.creator = creator
        self._proc_mesh = proc_mesh
        self.kind = kind
        self.class_name = "Client"
        self.context = Context(self, rank)
        self.loop = runner.loop if runner is not None else runtime.loop
        """The loop this actor's messages are handled on."""
        self._seq = itertools.count()
        self._choices: dict[str, int] = {}
        self.owned: list[OwnedMesh] = []
        """The meshes this actor spawned and has not stopped, oldest first."""
        self.life = Lifecycle(self, state, runner)
        self.mailbox = self.life.mailbox
        self.dispatch = self.life.dispatch

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
        instance.dispatch.adopt(actor)
        instance.life.start(None)
        return instance

    @classmethod
    def member(cls, runtime: Runtime, order: SpawnOrder, rank: Point) -> Instance:
        """Member ``rank`` of a new actor mesh; it is built before any message."""
        actor_id = member_id(order.mesh_id, order.name, rank.rank, order.incarnation)
        instance = cls(
            runtime,
            order.mesh_id,
            actor_id,
            order.name,
            rank,
            creator=order.creator,
            owner=order.owner,
            proc_mesh=order.proc_mesh,
            runner=runtime.world.actor_runner(actor_id),
            state=STARTING,
        )
        instance.life.start(order.blob)
        return instance

    @property
    def proc_id(self) -> str:
        return self.runtime.proc_id

    @property
    def proc(self) -> ProcMesh:
        """This actor's own proc, as a mesh of one."""
        return ProcMesh.single(self.runtime.proc_id, self.host_mesh)

    @property
    def host_mesh(self) -> HostMesh:
        return HostMesh.single(self.runtime.host_agent)

    @property
    def proc_mesh(self) -> ProcMesh:
        """The proc mesh this actor was spawned on."""
        return self._proc_mesh if self._proc_mesh is not None else self.proc

    @property
    def state(self) -> ActorState:
        return self.life.state

    @property
    def is_running(self) -> bool:
        """Constructed, and neither stopping, stopped nor failed."""
        return self.life.state is RUNNING

    @property
    def is_client(self) -> bool:
        """This stands for code outside any actor (on the root proc, the controller's)."""
        return self.kind is InstanceKind.CLIENT

    @property
    def running_call(self) -> Call | None:
        """The message being handled now, if any."""
        return self.dispatch.running

    @property
    def handled(self) -> int:
        """How many messages this actor has taken from its mailbox (read by `danaus top`)."""
        return self.dispatch.handled

    @property
    def mailbox_depth(self) -> int:
        """How many messages wait for this actor: in its mailbox, or on the way to its thread."""
        return self.mailbox.depth

    def enter(self) -> None:
        """Make this actor the context of the running task (for work done on its behalf)."""
        set_context(self.context)

    def next_seq(self) -> int:
        """The number of this actor's next message (numbers order a sender's messages)."""
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
        return "root" if self.is_client and self.runtime.proc_id == ROOT else self.name

    def _shown_class(self) -> str | None:
        obj = self.dispatch.obj
        return class_path(type(obj)) if obj is not None else None

    def __str__(self) -> str:
        """The actor named after its creators, as Monarch names it (`qualified_name`)."""
        return qualified_name(self.as_creator())

    def __repr__(self) -> str:
        return f"<Instance {self.actor_id} {self.state.value}>"

    def supervise(self, failure: MeshFailure) -> None:
        """A mesh this actor owns has a failed member: handle it at the next safe point
        (from the runtime's thread); failures are handled one at a time."""
        if self.is_client:
            self.runtime.unhandled(failure)
        else:
            self.mailbox.hand_off(self.dispatch.offer, Supervise(failure))

    def undeliverable(self, message: UndeliverableMessageEnvelope) -> None:
        """A message this actor sent could not be delivered (from any thread).

        An actor's ``_handle_undeliverable_message`` decides at its next safe
        point; for the controller's own code, the unhandled-fault hook does.
        """
        if self.is_client:
            failure = self.life.describe_failure(undelivered(message))
            self.runtime.on_loop(self.runtime.unhandled, failure)
        else:
            self.mailbox.hand_off(self.dispatch.offer, Returned(message))

    def stop(self, reason: str | None = None) -> None:
        """Stop this actor gracefully, from its own code: ``context().actor_instance.stop()``.

        The actor takes no new messages, finishes the queued ones, stops the
        meshes it owns and runs ``__cleanup__(None)``. Later messages to it are
        answered with `MeshStoppedError` (giving ``reason``). Stopping is not a
        failure: its owner is not told.
        """
        self._check_is_actor("stop")
        self.life.stop(reason)

    def abort(self, reason: str | None = None) -> None:
        """Fail this actor now, from its own code: ``context().actor_instance.abort(reason)``.

        As if an endpoint had raised under ``broadcast``: the call being handled
        and the queued ones are answered with `SupervisionError`, and the owner
        gets a `MeshFailure` whose cause names ``reason``. Code after ``abort()``
        in a sync endpoint still runs to its return (its result is discarded);
        an async endpoint is cancelled at its next ``await``.
        """
        self._check_is_actor("abort")
        cause = f"aborted: {reason or 'no reason provided'}"
        self.mailbox.on_own_thread(self.life.abort, cause)

    kill = abort

    def _check_is_actor(self, what: str) -> None:
        if self.kind is not InstanceKind.USER:
            raise RuntimeError(f"{what}() is for actors; {self.actor_id} is not an actor")

    async def stop_and_wait(self, timeout: float | None = None) -> None:
        """Stop gracefully: finish queued messages, stop owned meshes, run ``__cleanup__``.

        After ``timeout`` seconds the actor is abandoned without cleanup.
        """
        await self.life.stop_and_wait(timeout)

    def abandon(self, reason: BaseException) -> None:
        """End at once, without cleanup; the call it was running is answered with ``reason``.

        The call is answered from here, even if the actor's thread is stuck in it.
        """
        self.life.abandon(reason)

    def stop_last(self, owned: OwnedMesh) -> None:
        """Stop the mesh ``owned`` after every other this actor owns (it goes first in
        `owned`, which `stop_owned` empties from the end)."""
        self.owned.remove(owned)
        self.owned.insert(0, owned)

    async def stop_owned(self, timeout: float = STOP_TIMEOUT) -> None:
        """Stop the meshes this actor spawned, newest first, each within ``timeout`` seconds."""
        self.enter()
        while self.owned:
            await self.owned.pop().stop(timeout)
