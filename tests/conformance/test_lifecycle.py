"""Spawning, initialization, graceful stop and __cleanup__."""

from __future__ import annotations

import pytest

from danaus import Actor, Channel, MeshStoppedError, Port, endpoint, this_host


class Noted(Actor):
    """Reports its cleanup to a port so the controller can see the order."""

    def __init__(self, label: str, port: Port[str]) -> None:
        self.label = label
        self.port = port
        self.handled = 0

    @endpoint
    def touch(self) -> int:
        self.handled += 1
        return self.handled

    def __cleanup__(self, exc: BaseException | None) -> None:
        self.port.send(f"{self.label}:{self.handled}")


class NotedOwner(Noted):
    """Owns a child mesh; its cleanup must come after the child's."""

    def __init__(self, label: str, port: Port[str]) -> None:
        super().__init__(label, port)
        self.child = this_host().spawn_procs().spawn("child", Noted, "child", port)

    @endpoint
    def touch_child(self) -> int:
        return self.child.touch.call_one().get()


class AsyncCleanup(Actor):
    def __init__(self, port: Port[str]) -> None:
        self.port = port

    @endpoint
    async def ping(self) -> str:
        return "pong"

    async def __cleanup__(self, exc: BaseException | None) -> None:
        self.port.send("async cleanup")


def test_stop_runs_cleanup_after_queued_messages(run):
    def main():
        port, receiver = Channel.open()
        mesh = this_host().spawn_procs({"gpus": 2}).spawn("n", Noted, "n", port)
        for _ in range(3):
            mesh.touch.broadcast()
        mesh.stop().get()
        return sorted(receiver.recv().get() for _ in range(2))

    assert run(main) == ["n:3", "n:3"]


def test_stopped_mesh_refuses_messages(run):
    def main():
        port, _ = Channel.open()
        mesh = this_host().spawn_procs().spawn("n", Noted, "n", port)
        mesh.stop().get()
        with pytest.raises(MeshStoppedError, match="stopped"):
            mesh.touch.call_one()
        with pytest.raises(MeshStoppedError):
            mesh.slice().touch.broadcast()
        return True

    assert run(main)


def test_stopped_proc_mesh_refuses_spawn(run):
    def main():
        port, _ = Channel.open()
        procs = this_host().spawn_procs({"gpus": 2})
        procs.spawn("n", Noted, "n", port).touch.call().get()
        procs.stop().get()
        with pytest.raises(MeshStoppedError, match="`ProcMesh` has already been stopped"):
            procs.spawn("again", Noted, "again", port)
        return True

    assert run(main)


def test_stop_cleans_up_children_before_owners(run):
    def main():
        port, receiver = Channel.open()
        owner = this_host().spawn_procs().spawn("owner", NotedOwner, "owner", port)
        owner.touch_child.call_one().get()
        owner.stop().get()
        return [receiver.recv().get() for _ in range(2)]

    assert run(main) == ["child:1", "owner:0"]


def test_stopping_the_proc_mesh_stops_its_actors(run):
    def main():
        port, receiver = Channel.open()
        procs = this_host().spawn_procs({"gpus": 2})
        procs.spawn("a", Noted, "a", port)
        procs.spawn("b", Noted, "b", port)
        procs.stop().get()
        return sorted(receiver.recv().get() for _ in range(4))

    assert run(main) == ["a:0", "a:0", "b:0", "b:0"]


def test_async_cleanup_and_async_context_manager(run):
    async def main():
        port, receiver = Channel.open()
        async with this_host().spawn_procs() as procs:
            mesh = procs.spawn("a", AsyncCleanup, port)
            assert await mesh.ping.call_one() == "pong"
        return await receiver.recv()

    assert run(main) == "async cleanup"


def test_initialized_settles_after_init(run):
    def main():
        port, _ = Channel.open()
        procs = this_host().spawn_procs({"gpus": 3})
        procs.initialized.get()
        mesh = procs.spawn("n", Noted, "n", port)
        mesh.initialized.get()
        return mesh.touch.call().get().item(gpus=2)

    assert run(main) == 1
