"""A replicated key-value store on actors, and a variant with a planted bug.

A primary replica takes writes and copies them to a backup on another host.
The controller is the client: it writes, and when the primary fails it
promotes the backup. The invariant: every write the client saw acknowledged
is still there at the end.

`KVStore` copies each write to the backup before acknowledging it.
`BuggyKV` acknowledges first and copies writes in batches every so often: a
primary that dies (or is cut off) between an acknowledgment and the next batch
loses acknowledged writes. ``danaus chaos run`` finds it.
"""

from __future__ import annotations

import asyncio

from danaus import Actor, ActorError, ActorMesh, SupervisionError, endpoint, hosts
from danaus.chaos import History, Scenario


class Replica(Actor):
    def __init__(self, sync: bool, flush_every: float) -> None:
        self.data: dict[str, int] = {}
        self.sync = sync
        self.flush_every = flush_every
        self.backup: ActorMesh[Replica] | None = None
        self.unsent: dict[str, int] = {}

    @endpoint
    async def follow(self, backup: ActorMesh[Replica] | None) -> None:
        """Become the primary, copying writes to ``backup``."""
        self.backup = backup
        if backup is not None and not self.sync:
            asyncio.get_running_loop().create_task(self._flusher())

    async def _flusher(self) -> None:
        while True:
            await asyncio.sleep(self.flush_every)
            batch, self.unsent = self.unsent, {}
            if batch and self.backup is not None:
                self.backup.apply.broadcast(batch)

    @endpoint
    async def put(self, key: str, value: int) -> None:
        self.data[key] = value
        if self.backup is None:
            return
        if not self.sync:
            self.unsent[key] = value
            return
        try:
            await self.backup.apply.call_one({key: value})
        except SupervisionError:
            self.backup = None

    @endpoint
    def apply(self, batch: dict[str, int]) -> None:
        self.data.update(batch)

    @endpoint
    def get(self, key: str) -> int | None:
        return self.data.get(key)

    @endpoint
    def dump(self) -> dict[str, int]:
        return dict(self.data)


FAILURES = (SupervisionError, ActorError, asyncio.TimeoutError)
"""What a client sees when a replica fails."""


class KVStore(Scenario):
    """Writes with failover; no acknowledged write may be lost."""

    hosts = 3
    duration = 6.0
    settle = 5.0
    kinds = ("crash", "crash_host", "pause", "partition", "clog", "delay", "slow")
    sync_replication = True
    flush_every = 0.5
    """Seconds between two batches to the backup, when replication is not synchronous."""
    writes = 60

    async def run(self, history: History) -> dict[str, int] | None:
        def replica(host: int) -> ActorMesh[Replica]:
            cluster = hosts()  # on a real transport there may be fewer hosts: share them
            procs = cluster.slice(hosts=host % len(cluster)).spawn_procs(name=f"replica-h{host}")
            return procs.spawn("replica", Replica, self.sync_replication, self.flush_every)

        primary, backup = replica(1), replica(2)
        try:
            await primary.follow.call_one(backup)
            for i in range(self.writes):
                key = f"k{i}"
                op = history.invoke("put", key=key, value=i)
                try:
                    await asyncio.wait_for(primary.put.call_one(key, i), 5)
                except FAILURES as exc:
                    history.fail(op, repr(exc))
                    if backup is None:
                        raise
                    primary, backup = backup, None
                    history.record("failover")
                    await primary.follow.call_one(None)
                    continue
                history.ok(op)
                await asyncio.sleep(0.1)
            final = await primary.dump.call_one()
        except FAILURES as exc:
            history.record("unavailable", error=repr(exc))
            return None
        history.record("final", data=final)
        return final

    def check(self, history: History) -> list[str]:
        if next(history.of("unavailable"), None) is not None:
            return []
        final = next(history.of("final"), None)
        if final is None:
            return ["the store was never read back"]
        acked: dict[str, int] = {}
        for op in history.operations():
            if op["status"] == "ok":
                acked[op["key"]] = max(op["value"], acked.get(op["key"], -1))
        data = final["data"]
        return [
            f"acknowledged write {key}={value} lost (store has {data.get(key)})"
            for key, value in sorted(acked.items())
            if data.get(key, -1) < value
        ]


class BuggyKV(KVStore):
    """Acknowledges writes before they reach the backup: loses them when the primary dies."""

    sync_replication = False
