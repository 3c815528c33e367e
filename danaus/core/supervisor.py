"""A proc's side of supervision: the meshes its actors own, and their members' failures.

The supervisor of a proc hears of failures two ways: a failed actor's proc
sends a `Fail` message (an endpoint raised under ``broadcast``, ``__init__``
raised, ``__supervise__`` gave up...), and the transport reports lost procs
(exits, kills, silence) for every proc hosting a member of a watched mesh.
Each failed member is reported once. A mesh with a restart policy is restarted
while its budget lasts; otherwise the failure goes to the owning actor.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from danaus.core.context import set_context
from danaus.core.instance import member_id
from danaus.core.supervision import MeshFailure, RestartBudget

if TYPE_CHECKING:
    from danaus.core.instance import Instance
    from danaus.core.mesh import ActorMesh
    from danaus.core.runtime import Runtime
    from danaus.transports.base import ProcLoss

log = logging.getLogger("danaus.supervision")


@dataclass
class _Owned:
    owner: Instance
    mesh: ActorMesh[Any]
    budget: RestartBudget | None
    restarting: bool = False


class Supervisor:
    """The meshes owned by actors of one proc."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self._owned: dict[str, _Owned] = {}

    def adopt(self, owner: Instance, mesh: ActorMesh[Any]) -> None:
        """Watch ``mesh`` (owned by ``owner``) for failures."""
        life = mesh._life
        assert life is not None
        budget = RestartBudget(life.policy) if life.policy is not None else None
        self._owned[mesh._mesh_id] = _Owned(owner, mesh, budget)
        self._watch_members(mesh)

    def _watch_members(self, mesh: ActorMesh[Any]) -> None:
        for proc in dict.fromkeys(mesh._members()):
            self.runtime.watch(proc)

    def release(self, mesh_id: str) -> None:
        """Stop watching a mesh (it is being stopped: what follows is not a failure)."""
        if self._owned.pop(mesh_id, None) is not None:
            self.runtime.trace.record("release", self.runtime.proc_id, mesh=mesh_id)

    def on_loss(self, loss: ProcLoss) -> None:
        """A proc is gone: every member of an owned mesh that lived there failed."""
        for mesh_id, owned in list(self._owned.items()):
            members = owned.mesh._members()
            life = owned.mesh._life
            assert life is not None
            for index, base in enumerate(owned.mesh._shape.ranks()):
                if members[base] != loss.proc:
                    continue
                self.on_failure(
                    MeshFailure(
                        mesh_name=owned.mesh.name,
                        mesh_id=mesh_id,
                        rank=owned.mesh._shape.point(index),
                        actor_id=member_id(
                            mesh_id, owned.mesh.name, index, life.incarnations.get(base, 0)
                        ),
                        proc=loss.proc,
                        host=loss.host,
                        pid=loss.pid,
                        cause=f"its process {loss.reason}",
                        exit_code=loss.exit_code,
                        signal=loss.signal,
                    )
                )

    def on_failure(self, failure: MeshFailure) -> None:
        """A member of an owned mesh failed (loop thread); each failed member is reported once."""
        owned = self._owned.get(failure.mesh_id)
        if owned is None:
            return
        base = owned.mesh._shape.ranks()[failure.rank.rank]
        life = owned.mesh._life
        assert life is not None
        if base in life.failed:
            return
        life.failed[base] = failure
        failure.mesh = owned.mesh
        self.runtime.trace.record(
            "failure",
            self.runtime.proc_id,
            mesh=failure.mesh_id,
            rank=failure.rank.rank,
            cause=failure.cause,
        )
        if owned.budget is not None and owned.owner.state == "running":
            one_for_all = owned.budget.policy.strategy == "one_for_all"
            if one_for_all and owned.restarting:
                return
            delay = owned.budget.next_delay(self.runtime.loop.time(), self.runtime.world.random)
            if delay is not None:
                owned.restarting = one_for_all
                self.runtime.loop.create_task(self._restart(owned, base, delay))
                return
        owned.owner.supervise(failure)

    async def _restart(self, owned: _Owned, failed: int, delay: float) -> None:
        mesh = owned.mesh
        life = mesh._life
        assert life is not None and life.policy is not None
        await asyncio.sleep(delay)
        if life.stopped or owned.owner.state != "running":
            return
        set_context(owned.owner.context)
        if life.policy.strategy == "one_for_all":
            ranks = mesh._shape.ranks()
            survivors = [r for r in ranks if r not in life.failed]
            await mesh._stop_ranks(survivors)
        else:
            ranks = [failed]
        owned.restarting = False
        try:
            await mesh._respawn(ranks, self.runtime)
        except Exception as exc:
            log.error("restarting mesh %r failed: %r", mesh.name, exc)
            owned.owner.supervise(life.failed[failed])
            return
        for base in ranks:
            life.failed.pop(base, None)
        self._watch_members(mesh)
        self.runtime.trace.record(
            "restart",
            self.runtime.proc_id,
            mesh=mesh._mesh_id,
            ranks=[i for i, base in enumerate(mesh._shape.ranks()) if base in ranks],
        )
