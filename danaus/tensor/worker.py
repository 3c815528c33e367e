"""`TensorWorker`: the tensor engine on one proc, one per proc of a mesh the controller activated.

The actor is the proc's mailbox for the engine: its endpoints never block.
``run`` hands each segment of a batch to the stream it is for
(`danaus.tensor.executor.Executor`), which runs it on a thread (or, on the
simulator, greenlets) of its own. Messages from peer workers (a part of a
collective, the offer of a tensor moving between meshes) go into the
worker's inbox, which the waiting stream takes them from. The worker at rank
0 of the mesh also keeps the key-value store the procs meet at to build
torch.distributed process groups.

Everything the streams of a proc share is in its `WorkerState`: the table
from handle id to this proc's shard, the functions and groups the controller
defined, the events between streams, and the proc's torch generator.
"""

from __future__ import annotations

import hashlib
import logging
import pickle
from typing import Any

import torch

from danaus.core.actor import Actor, endpoint, endpoints_of
from danaus.core.actor_mesh import ActorMesh, placement_of
from danaus.core.context import context
from danaus.core.owned import STOP_TIMEOUT
from danaus.core.ports import Port
from danaus.core.undeliverable import UndeliverableMessageEnvelope
from danaus.tensor import commands
from danaus.tensor.collectives import Collectives
from danaus.tensor.executor import Executor
from danaus.tensor.functions import resolve
from danaus.tensor.inbox import Events, Inbox
from danaus.tensor.isolation import Isolated
from danaus.tensor.store import StoreHost
from danaus.tensor.transfers import Transfers, member

log = logging.getLogger("danaus.tensor")


def proc_seed(seed: int, mesh_id: str, rank: int) -> int:
    """The seed of a proc's torch generator: from the run's seed, its mesh and its rank."""
    digest = hashlib.blake2b(f"{seed}/{mesh_id}/{rank}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & (2**63 - 1)


class WorkerState:
    """What the streams of one proc's tensor worker share."""

    def __init__(self, seed: int, mesh_id: str) -> None:
        instance = context().actor_instance
        runtime = instance.runtime
        self.runtime = runtime
        self.point = instance.rank
        self.rank = instance.rank.rank
        self.mesh_id = mesh_id
        self.table: dict[int, Any] = {}
        self.functions: dict[int, Any] = {}
        self.groups: dict[int, tuple[int, ...]] = {}
        procs = placement_of(instance.proc_mesh)
        self.peers: ActorMesh[TensorWorker] = ActorMesh(
            instance.key, instance.name, endpoints_of(TensorWorker), procs.members(), procs.shape
        )
        self.events = Events(runtime)
        self.inbox = Inbox(runtime)
        generator_seed = proc_seed(seed, mesh_id, self.rank)
        self.isolated: Isolated | None = None
        if runtime.pid is None:  # procs share this process: each keeps its own torch state
            generator = torch.Generator().manual_seed(generator_seed)
            self.isolated = Isolated(generator.get_state())
        else:
            torch.manual_seed(generator_seed)
        self.collectives = Collectives(self)
        self.transfers = Transfers(self)

    def proc_of(self, rank: int) -> str:
        """The proc of root rank ``rank``."""
        return placement_of(self.peers).members()[rank]

    def peer(self, rank: int) -> ActorMesh[TensorWorker]:
        """The worker of root rank ``rank``, as a mesh of one."""
        return member(self.peers, rank)

    def define(self, command: tuple[Any, ...]) -> None:
        if command[0] == commands.GROUPS:
            _, group_id, members = command
            mine = next((m for m in members if self.rank in m), None)
            if mine is not None:
                self.groups[group_id] = mine
            return
        _, fn_id, what, payload = command
        self.functions[fn_id] = resolve(what, payload)


class TensorWorker(Actor):
    """The tensor engine's agent on one proc."""

    def __init__(self, seed: int, mesh_id: str) -> None:
        self._state = WorkerState(seed, mesh_id)
        self._streams: dict[int, Executor] = {}
        self._store = StoreHost()

    def _stream(self, sid: int) -> Executor:
        found = self._streams.get(sid)
        if found is None:
            runner = self._state.runtime.world.actor_runner(
                f"{context().actor_instance.actor_id}/stream-{sid}"
            )
            found = self._streams[sid] = Executor(self._state, sid, runner)
        return found

    @endpoint
    async def setup(self, command: tuple[Any, ...]) -> None:
        """A function or process groups the controller defines for every stream."""
        self._state.define(command)

    @endpoint
    async def run(self, payload: bytes) -> None:
        """A batch: each segment to its stream, in order."""
        batch, segments = pickle.loads(payload)
        first = 0
        for sid, batch_commands in segments:
            self._stream(sid).submit((batch, first), batch_commands)
            first += len(batch_commands)

    @endpoint
    async def deliver(self, key: Any, value: Any) -> None:
        """A value a stream of this proc waits for (from a peer worker)."""
        self._state.inbox.put(key, value)

    @endpoint
    async def transferred(self, transfer: int, rank: int) -> None:
        """Root rank ``rank`` has read what this proc offered it for ``transfer``."""
        self._state.transfers.done(transfer, rank)

    @endpoint(explicit_response_port=True)
    async def store(self, port: Port[Any], op: str, key: str, value: Any) -> None:
        """The rendezvous store of the mesh (rank 0 only): see `danaus.tensor.store`."""
        self._store.handle(port, op, key, value)

    def _handle_undeliverable_message(self, message: UndeliverableMessageEnvelope) -> bool:
        """A value for a peer that stopped (its mesh is stopping): whoever waited for the
        value learns of the stop or the loss another way; this worker is fine."""
        log.info("%s", message)
        return True

    def __cleanup__(self, exc: BaseException | None) -> None:
        self._state.inbox.close()  # a stream waiting for a peer or another stream ends
        self._state.events.close()
        for executor in self._streams.values():
            executor.close(STOP_TIMEOUT)
        self._state.collectives.close()
