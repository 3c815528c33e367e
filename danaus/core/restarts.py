"""Restarting failed members of a mesh whose owner gave it a `RestartPolicy`.

The owner's supervisor decides that a member is restarted and when
(`OwnedMesh.restart_delay`); this is how. A member whose proc is lost gets a
new proc on the same host. With ``one_for_all``, the surviving members are
stopped first and every member is spawned again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import replace

from danaus.core import trace as ev
from danaus.core.agent_refs import agent_of
from danaus.core.errors import SupervisionError
from danaus.core.mesh import replacement_proc
from danaus.core.owned import STOP_TIMEOUT, OwnedMesh

log = logging.getLogger("danaus.supervision")


async def restart(owned: OwnedMesh, failed: int, delay: float) -> None:
    """After ``delay`` seconds, restart member ``failed`` of ``owned`` (every member, for
    one_for_all); if that fails, the member's failure goes to the owner."""
    assert owned.budget is not None
    await asyncio.sleep(delay)
    if owned.stopped or not owned.owner.is_running:
        return
    owned.owner.enter()
    shape = owned.whole.shape
    if owned.budget.policy.strategy == "one_for_all":
        bases = shape.ranks()
        await _stop_members(owned, [b for b in bases if b not in owned.failed])
    else:
        bases = [failed]
    owned.restarting = False
    try:
        await _respawn(owned, bases)
    except Exception as exc:
        log.error("restarting mesh %r failed: %r", owned.name, exc)
        owned.owner.supervise(owned.failed[failed])
        return
    for base in bases:
        owned.failed.pop(base, None)
    runtime = owned.owner.runtime
    runtime.supervisor.watch_members(owned)
    ranks = [i for i, base in enumerate(shape.ranks()) if base in bases]
    runtime.trace.record(ev.Restart(proc=runtime.proc_id, mesh=owned.whole.mesh_id, ranks=ranks))


async def _stop_members(owned: OwnedMesh, bases: list[int]) -> None:
    """Stop the members at these base ranks (the survivors, before a one_for_all restart)."""
    procs = owned.members()
    for base in bases:
        with contextlib.suppress(SupervisionError):
            await agent_of(procs[base]).stop_actor.call(owned.whole.mesh_id, STOP_TIMEOUT)


async def _respawn(owned: OwnedMesh, bases: list[int]) -> None:
    """Spawn the members at these base ranks again; those whose proc died get a new proc.

    Restarts of other members may run meanwhile: the member list is read again
    after the new procs are up, and only these positions change.
    """
    assert owned.spawn is not None
    runtime = owned.owner.runtime
    moved = {}
    for base in bases:
        if runtime.is_lost(owned.members()[base]):
            moved[base] = await replacement_proc(owned, base)
    procs = list(owned.members())
    for base, proc in moved.items():
        procs[base] = proc
    owned.procs = procs
    incarnation = max(owned.incarnations.values(), default=0) + 1
    shape = owned.whole.shape
    for index, base in enumerate(shape.ranks()):
        if base in bases:
            owned.incarnations[base] = incarnation
            order = replace(owned.spawn, rank=shape.point(index), incarnation=incarnation)
            agent_of(procs[base]).spawn.broadcast(order)
