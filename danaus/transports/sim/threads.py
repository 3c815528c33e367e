"""An actor's thread on the simulator: the callbacks that run its code, and stopping them.

On a real transport each actor runs on a thread of its own; on the simulator
every actor runs on the world's one loop. An actor's *thread* there is what
would run on its own: the task that serves its mailbox, the tasks of its
concurrent endpoints and of its supervision, the tasks its code starts, and
the callbacks its code schedules. Stopping it (the ``pause_thread`` fault) holds
those callbacks back on the loop (`VirtualTimeLoop.hold_back`) while everything
else runs on: the proc's other actors, its agents, the network, and so its
heartbeats, which the failure detector keeps receiving. Messages for the
stopped actor queue up in its mailbox and are handled, in order, once it runs
again. A proc that ends meanwhile ends the stop too: its tasks are cancelled
and must be let finish.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from danaus.core.faults import FaultUnsupported, Heal
from danaus.transports.sim.loop import Handle
from danaus.transports.sim.schedule import owner_of

if TYPE_CHECKING:
    from danaus.transports.sim.world import SimWorld


def _task_of_instance(task: asyncio.Task[Any]) -> Any:
    """The object whose method a task's outermost coroutine is: an actor's instance, for the
    tasks that serve its mailbox, its concurrent endpoints and its supervision."""
    frame = getattr(task.get_coro(), "cr_frame", None)
    return None if frame is None else frame.f_locals.get("self")


def on_thread_of(actor: Any) -> Callable[[Handle], bool]:
    """Whether a callback runs code of ``actor``'s thread (an `Instance`)."""

    def runs_for(handle: Handle) -> bool:
        if owner_of(handle) is actor:  # code run in the actor's context, and its tasks
            return True
        task = getattr(handle._callback, "__self__", None)
        return isinstance(task, asyncio.Task) and _task_of_instance(task) is actor

    return runs_for


class StoppedThreads:
    """The actors' threads that faults stopped in one world, by proc (the ``pause_thread``
    fault's state)."""

    def __init__(self, world: SimWorld) -> None:
        self._world = world
        self._releases: dict[str, list[Callable[[], None]]] = {}

    def stop(self, proc: str, index: int) -> Heal:
        """Stop the thread of actor ``index`` (modulo their count, in spawn order) of ``proc``
        until the returned heal is called, or the proc ends."""
        runtime = self._world.procs.get(proc)
        actors = runtime.actors() if runtime is not None else []
        if not actors:
            raise FaultUnsupported("the proc runs no actor")
        release = self._world.loop.hold_back(on_thread_of(actors[index % len(actors)]))
        releases = self._releases.setdefault(proc, [])
        releases.append(release)

        def heal() -> None:
            if release in releases:
                releases.remove(release)
                release()

        return heal

    def proc_ended(self, proc: str) -> None:
        """``proc`` is gone: what its stopped threads held runs (its tasks end, cancelled)."""
        for release in self._releases.pop(proc, ()):
            release()
