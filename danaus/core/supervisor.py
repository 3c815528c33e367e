"""A proc's side of supervision: the meshes its actors own, and their members' failures.

The supervisor of a proc hears of failures two ways: a failed actor's proc
sends a `Fail` message (an endpoint raised under ``broadcast``, ``__init__``
raised, ``__supervise__`` gave up...), and the transport reports lost procs
(exits, kills, silence) for every proc hosting a member of a watched mesh.
Each failed member is reported once. A mesh with a restart policy is restarted
while its budget lasts (`danaus.core.restarts`); otherwise the failure goes to
the owning actor.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Protocol

from danaus.core import trace as ev
from danaus.core.restarts import restart
from danaus.core.spawn_order import member_id
from danaus.core.supervision import MeshFailure

if TYPE_CHECKING:
    from danaus.core.owned import OwnedMesh
    from danaus.core.trace import Trace
    from danaus.core.transport import ProcLoss


class SupervisingProc(Protocol):
    """What a supervisor needs of its proc's runtime."""

    @property
    def proc_id(self) -> str: ...

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...

    @property
    def trace(self) -> Trace: ...

    def watch(self, proc: str) -> None: ...


class Supervisor:
    """The actor meshes owned by actors of one proc, watched for failures."""

    def __init__(self, proc: SupervisingProc) -> None:
        self.proc = proc
        self._owned: dict[str, OwnedMesh] = {}

    def adopt(self, owned: OwnedMesh) -> None:
        """Watch the actor mesh ``owned`` for failures."""
        self._owned[owned.whole.mesh_id] = owned
        self.watch_members(owned)

    def watch_members(self, owned: OwnedMesh) -> None:
        for proc in dict.fromkeys(owned.members()):
            self.proc.watch(proc)

    def failures(self) -> list[MeshFailure]:
        """The failed members of the meshes watched here (until a restart replaces them)."""
        return [f for owned in list(self._owned.values()) for f in list(owned.failed.values())]

    def release(self, mesh_id: str) -> None:
        """Stop watching a mesh (it is being stopped: what follows is not a failure)."""
        if self._owned.pop(mesh_id, None) is not None:
            self.proc.trace.record(ev.Release(proc=self.proc.proc_id, mesh=mesh_id))

    def on_loss(self, loss: ProcLoss) -> None:
        """A proc is gone: every member of an owned mesh that lived there failed, unless the
        proc was stopped (by the stop of a proc mesh its owner may not be this one's)."""
        if loss.stopped:
            return
        for mesh_id, owned in list(self._owned.items()):
            members = owned.members()
            shape = owned.whole.shape
            for index, base in enumerate(shape.ranks()):
                if members[base] != loss.proc:
                    continue
                self.on_failure(
                    MeshFailure(
                        mesh_name=owned.name,
                        mesh_id=mesh_id,
                        rank=shape.point(index),
                        actor_id=member_id(mesh_id, owned.name, index, owned.incarnation(base)),
                        proc=loss.proc,
                        host=loss.host,
                        pid=loss.pid,
                        cause=loss.actor_cause(),
                        exit_code=loss.exit_code,
                        signal=loss.signal,
                        actor_class=owned.actor_class,
                    )
                )

    def on_failure(self, failure: MeshFailure) -> None:
        """A member of an owned mesh failed (loop thread); each failed member is reported once."""
        owned = self._owned.get(failure.mesh_id)
        if owned is None:
            return
        base = owned.whole.shape.ranks()[failure.rank.rank]
        if not owned.member_failed(base, failure):
            return
        self.proc.trace.record(
            ev.Failure(
                proc=self.proc.proc_id,
                mesh=failure.mesh_id,
                rank=failure.rank.rank,
                cause=failure.cause,
            )
        )
        if owned.budget is not None and owned.owner.is_running:
            one_for_all = owned.budget.policy.strategy == "one_for_all"
            if one_for_all and owned.restarting:
                return
            delay = owned.restart_delay()
            if delay is not None:
                owned.restarting = one_for_all
                self.proc.loop.create_task(restart(owned, base, delay))
                return
        owned.owner.supervise(failure)
