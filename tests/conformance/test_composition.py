"""Actors calling actors, meshes passed in messages, actors spawning meshes of their own."""

from __future__ import annotations

import asyncio

from danaus import Actor, ActorMesh, context, endpoint, this_host, this_proc


class Store(Actor):
    def __init__(self) -> None:
        self.data: dict[str, int] = {}

    @endpoint
    def put(self, key: str, value: int) -> None:
        self.data[key] = value

    @endpoint
    def get(self, key: str) -> int | None:
        return self.data.get(key)


class SyncClient(Actor):
    """Blocks on another actor's reply from a sync endpoint."""

    def __init__(self, store: ActorMesh[Store]) -> None:
        self.store = store

    @endpoint
    def put_then_get(self, key: str, value: int) -> int | None:
        self.store.put.call(key, value).get()
        return self.store.get.choose(key).get()


class AsyncClient(Actor):
    @endpoint
    async def read_all(self, store: ActorMesh[Store], key: str) -> list[int | None]:
        values = await store.get.call(key)
        return list(values.values())


class Parent(Actor):
    """Spawns a mesh of its own and talks to it."""

    def __init__(self, width: int) -> None:
        procs = this_host().spawn_procs({"workers": width})
        self.children = procs.spawn("children", Store)

    @endpoint
    def fill(self, value: int) -> list[int | None]:
        self.children.put.call("k", value).get()
        return list(self.children.get.call("k").get().values())

    @endpoint
    def children_mesh(self) -> ActorMesh[Store]:
        return self.children


class Local(Actor):
    @endpoint
    def where(self) -> str:
        return context().actor_instance.proc_id


class Spawner(Actor):
    @endpoint
    async def spawn_local(self) -> tuple[str, str]:
        here = context().actor_instance.proc_id
        local = this_proc().spawn("local", Local)
        return here, await local.where.call_one()


def test_sync_endpoint_blocks_on_another_actors_reply(run):
    def main():
        procs = this_host().spawn_procs({"gpus": 2})
        store = procs.spawn("store", Store)
        client = procs.spawn("client", SyncClient, store.slice(gpus=0))
        return client.put_then_get.call("a", 7).get()

    assert list(run(main).values()) == [7, 7]


def test_mesh_reference_passed_as_argument(run):
    def main():
        procs = this_host().spawn_procs({"gpus": 3})
        store = procs.spawn("store", Store)
        store.put.call("x", 4).get()
        client = procs.spawn("client", AsyncClient)
        return client.slice(gpus=2).read_all.call_one(store, "x").get()

    assert run(main) == [4, 4, 4]


def test_actor_spawns_a_mesh_of_its_own(run):
    def main():
        parent = this_host().spawn_procs().spawn("parent", Parent, 3)
        filled = parent.fill.call_one(9).get()
        children = parent.children_mesh.call_one().get()
        return filled, children.get.call("k").get()

    filled, from_controller = run(main)
    assert filled == [9, 9, 9]
    assert list(from_controller.values()) == [9, 9, 9]


def test_this_proc_inside_an_actor_is_its_own_proc(run):
    def main():
        spawner = this_host().spawn_procs().spawn("spawner", Spawner)
        return spawner.spawn_local.call_one().get()

    here, there = run(main)
    assert here == there


def test_controller_can_spawn_on_its_own_proc(run):
    def main():
        local = this_proc().spawn("local", Local)
        return local.where.call_one().get(), context().actor_instance.proc_id

    where, controller = run(main)
    assert where == controller


def test_many_actors_calling_each_other_concurrently(run):
    async def main():
        procs = this_host().spawn_procs({"gpus": 4})
        store = procs.spawn("store", Store)
        clients = procs.spawn("clients", SyncClient, store)
        futures = [clients.put_then_get.call(f"k{i}", i) for i in range(5)]
        results = await asyncio.gather(*(asyncio.ensure_future(_await(f)) for f in futures))
        return [list(r.values()) for r in results]

    results = run(main)
    assert results == [[i] * 4 for i in range(5)]


async def _await(future):
    return await future
