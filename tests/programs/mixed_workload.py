"""A program that exercises most of the runtime: used to check determinism.

Several meshes over several hosts, broadcasts, gathers, actors calling actors,
actors spawning meshes, sleeps of random lengths, ports, stop.
"""

from __future__ import annotations

import asyncio
import random

from danaus import Accumulator, Actor, Channel, Port, current_rank, endpoint, hosts


class Shard(Actor):
    def __init__(self) -> None:
        self.items: dict[int, int] = {}

    @endpoint
    async def put(self, key: int, value: int) -> None:
        await asyncio.sleep(random.Random(key).random() / 100)
        self.items[key] = value

    @endpoint
    def total(self) -> int:
        return sum(self.items.values())


class Worker(Actor):
    def __init__(self, shards) -> None:
        self.shards = shards
        self.done = 0

    @endpoint
    def step(self, n: int) -> int:
        me = current_rank().rank
        for i in range(n):
            self.shards.put.choose(me * 1000 + i, i).get()
        self.done += n
        return self.done

    @endpoint
    async def report(self, port: Port[int]) -> None:
        await asyncio.sleep(0.001 * (current_rank().rank + 1))
        port.send(self.done)


class Coordinator(Actor):
    def __init__(self) -> None:
        self.procs = hosts().spawn_procs({"shards": 2})
        self.shards = self.procs.spawn("shards", Shard)

    @endpoint
    async def run(self, workers, rounds: int) -> int:
        for r in range(rounds):
            await workers.step.call(r + 1)
        return await Accumulator(self.shards.total, 0, lambda a, b: a + b).accumulate()

    @endpoint
    def shard_mesh(self):
        return self.shards


def main() -> dict:
    all_hosts = hosts()
    coordinator = all_hosts.slice(hosts=0).spawn_procs().spawn("coordinator", Coordinator)
    shards = coordinator.shard_mesh.call_one().get()
    workers = all_hosts.spawn_procs({"w": 2}).spawn("workers", Worker, shards)
    total = coordinator.run.call_one(workers, 3).get()
    port, receiver = Channel.open()
    workers.report.broadcast(port)
    reports = [receiver.recv().get() for _ in range(len(workers))]
    workers.stop().get()
    return {"total": total, "reports": reports}
