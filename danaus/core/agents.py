"""System actors: the agent every proc runs, and the agent every host runs.

They are ordinary actors with well-known keys (`danaus.core.agent_refs`, which
is also how other code messages them), so spawning actors and procs travels as
ordinary messages, in order, over any transport. Endpoints that may wait a long
time answer through an explicit port from a task of their own, so the agent
keeps taking messages meanwhile (a stop may need a spawn to finish).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from danaus.core.actor import Actor, endpoint, shared_arguments
from danaus.core.bootstrap import BootstrapCommand
from danaus.core.context import current_rank
from danaus.core.logs import LoggingOptions
from danaus.core.ports import Port
from danaus.core.serialize import Buffer
from danaus.core.trace import Event
from danaus.core.transport import ProcSpec

if TYPE_CHECKING:
    from danaus.core.actor_mesh import ActorMesh
    from danaus.core.runtime import Runtime
    from danaus.core.spawn_order import SpawnOrder
    from danaus.core.undeliverable import UndeliverableMessageEnvelope

log = logging.getLogger("danaus.agents")

AgentOf = Callable[[str], "ActorMesh[Any]"]
"""The agent of a proc, as a mesh of one to message (`danaus.core.agent_refs.agent_of`)."""

TRACE_TIMEOUT = 5.0
"""How long a proc about to stop may take to hand over its trace."""


def _answer_later(runtime: Runtime, port: Port[Any], work: Callable[[], Awaitable[Any]]) -> None:
    """Run ``work()`` as a task of its own and send its outcome to ``port``."""

    async def run() -> None:
        try:
            port.send(await work())
        except Exception as exc:  # also an answer too large to send
            port.exception(exc)

    runtime.loop.create_task(run())


class _Agent(Actor):
    def _handle_undeliverable_message(self, message: UndeliverableMessageEnvelope) -> bool:
        """An agent's answer could not be delivered: its caller is gone; nothing to do."""
        log.info("%s", message)
        return True


class ProcAgent(_Agent):
    """Spawns and stops actors on its proc, and runs what tools ask of it (`probe`)."""

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime

    @endpoint
    @shared_arguments
    async def spawn(self, order: SpawnOrder) -> None:
        """Host a member of an actor mesh (at this agent's position in the cast, by default)."""
        rank = order.rank if order.rank is not None else current_rank()
        self._runtime.spawn(order, rank)

    @endpoint(explicit_response_port=True)
    async def stop_actor(self, port: Port[None], mesh_id: str, timeout: float) -> None:
        runtime = self._runtime
        _answer_later(runtime, port, lambda: runtime.stop_actors([mesh_id], timeout))

    @endpoint(explicit_response_port=True)
    async def stop_all(self, port: Port[None], timeout: float) -> None:
        runtime = self._runtime
        _answer_later(runtime, port, lambda: runtime.stop_actors(None, timeout))

    @endpoint
    async def ping(self) -> None:
        return None

    @endpoint
    async def set_log_level(self, level: int) -> None:
        """The level of this proc's root logger (where the proc has a process of its own)."""
        if self._runtime.pid is not None:
            logging.getLogger().setLevel(level)

    @endpoint
    async def actors(self) -> list[tuple[str, str, int]]:
        """The running user actors here: (mesh id, mesh name, rank)."""
        return [(a.key, a.name, a.rank.rank) for a in self._runtime.actors() if a.is_running]

    @endpoint
    async def trace_events(self) -> list[Event]:
        """This proc's trace so far (empty where tracing is off)."""
        return list(self._runtime.trace.events)

    @endpoint(explicit_response_port=True)
    async def probe(self, port: Port[Any], fn: Callable[[Runtime], Any]) -> None:
        """Answer with ``fn(runtime)`` run here (awaited if it is awaitable).

        How tools read a proc's state (`danaus top`), wait on the controller
        (the debugger) and find the job's controllers (`get_or_spawn_controller`,
        on the root proc) without an endpoint each. It runs nothing a member of
        the job could not run already, by spawning an actor.
        """

        async def run() -> Any:
            result = fn(self._runtime)
            return await result if inspect.isawaitable(result) else result

        _answer_later(self._runtime, port, run)


class HostAgent(_Agent):
    """Starts and stops procs on its host through the world's launcher.

    ``agent_of`` reaches the agents of the procs it stops, for their traces
    (given, not imported: addressing an agent needs this module's classes).
    """

    def __init__(self, runtime: Runtime, agent_of: AgentOf) -> None:
        self._runtime = runtime
        self._agent_of = agent_of
        self._launched: dict[str, list[str]] = {}

    @endpoint(explicit_response_port=True)
    async def spawn_procs(
        self,
        port: Port[None],
        mesh_id: str,
        count: int,
        name: str,
        commands: Sequence[BootstrapCommand] | None = None,
        setup: Sequence[Buffer] | None = None,
    ) -> None:
        """Start this host's ``count`` procs of a mesh; ``commands`` holds one per proc of it."""
        first = current_rank().rank * count
        host = self._runtime.host
        specs = [
            ProcSpec(
                f"{mesh_id}.{first + i}",
                host,
                name,
                commands[first + i] if commands is not None else None,
                setup,
            )
            for i in range(count)
        ]
        self._launched[mesh_id] = [spec.proc_id for spec in specs]
        launcher = self._runtime.world.launcher
        _answer_later(self._runtime, port, lambda: launcher.launch(specs))

    @endpoint(explicit_response_port=True)
    async def stop_procs(self, port: Port[None], mesh_id: str, timeout: float) -> None:
        procs = self._launched.pop(mesh_id, [])
        runtime = self._runtime

        async def stop() -> None:
            if runtime.trace.enabled:
                await keep_traces(runtime, procs, self._agent_of)
            await runtime.world.launcher.stop(procs, timeout)

        _answer_later(runtime, port, stop)

    @endpoint
    async def logging_option(self, procs: Sequence[str], options: LoggingOptions) -> None:
        """How the output of these procs (those started here) reaches the controller."""
        self._runtime.world.launcher.set_output(procs, options)


async def keep_traces(runtime: Runtime, procs: Sequence[str], agent_of: AgentOf) -> None:
    """Add the trace of each of ``procs`` (about to stop) to ``runtime``'s, so none is lost."""
    world = runtime.world
    live = set(world.faults.workers(runtime.proc_id))  # the procs this host agent started

    async def one(proc: str) -> list[Event]:
        try:
            return await asyncio.wait_for(agent_of(proc).trace_events.call_one(), TRACE_TIMEOUT)
        except Exception as exc:
            log.warning("the trace of proc %s is lost: %r", proc, exc)
            return []

    remote = [p for p in procs if p in live and not world.is_local(p)]
    if remote:
        found = await asyncio.gather(*(one(p) for p in remote))
        runtime.trace.events.extend(e for events in found for e in events)
