"""Controllers: one actor per name for the whole job, found from the controller and from actors."""

from __future__ import annotations

import os

import pytest

from danaus import (
    Actor,
    ActorError,
    SupervisionError,
    context,
    current_actor_name,
    endpoint,
    get_or_spawn_controller,
    this_host,
)

NOTES: list[str] = []
"""What controllers noted. They live in the controller's process, so the test sees it."""


class Counter(Actor):
    """A controller that counts, and says where it lives."""

    def __init__(self, start: int = 0) -> None:
        self.value = start
        NOTES.append(f"init {start}")

    @endpoint
    def incr(self) -> int:
        self.value += 1
        return self.value

    @endpoint
    def where(self) -> tuple[str, int, str]:
        return context().actor_instance.proc_id, os.getpid(), current_actor_name()

    @endpoint
    def note(self, text: str) -> None:
        NOTES.append(text)

    @endpoint
    def fail(self) -> None:
        raise RuntimeError("controller broke")

    def __cleanup__(self, exc: BaseException | None) -> None:
        NOTES.append("controller cleanup")


class Asker(Actor):
    """Finds the job's controller from inside an actor, from sync and async endpoints."""

    @endpoint
    def incr_sync(self, name: str) -> int:
        return get_or_spawn_controller(name, Counter).get().incr.call_one().get()

    @endpoint
    async def incr_async(self, name: str) -> int:
        controller = await get_or_spawn_controller(name, Counter)
        return await controller.incr.call_one()

    @endpoint
    async def where(self, name: str) -> tuple[str, int, str]:
        controller = await get_or_spawn_controller(name, Counter)
        return await controller.where.call_one()


class UsesControllerInCleanup(Actor):
    @endpoint
    def ping(self) -> None:
        return None

    def __cleanup__(self, exc: BaseException | None) -> None:
        controller = get_or_spawn_controller("notes", Counter).get()
        controller.note.call_one("used by a cleanup").get()


@pytest.fixture(autouse=True)
def _fresh_notes():
    NOTES.clear()


def test_same_controller_for_the_same_name(run):
    def main():
        first = get_or_spawn_controller("counter", Counter, 10).get()
        second = get_or_spawn_controller("counter", Counter, 99).get()
        other = get_or_spawn_controller("other", Counter).get()
        return [mesh.incr.call_one().get() for mesh in (first, second, other)]

    assert run(main) == [11, 12, 1]
    assert NOTES.count("init 10") == 1 and "init 99" not in NOTES


def test_actors_and_controller_share_one_controller(run):
    def main():
        askers = this_host().spawn_procs({"gpus": 3}).spawn("askers", Asker)
        from_actors = sorted(askers.incr_sync.call("shared").get().values())
        from_async = askers.slice(gpus=0).incr_async.call_one("shared").get()
        mine = get_or_spawn_controller("shared", Counter).get().incr.call_one().get()
        return from_actors, from_async, mine

    assert run(main) == ([1, 2, 3], 4, 5)
    assert NOTES.count("init 0") == 1


def test_concurrent_first_requests_spawn_one_controller(run):
    def main():
        askers = this_host().spawn_procs({"gpus": 4}).spawn("askers", Asker)
        return sorted(askers.incr_async.call("raced").get().values())

    assert run(main) == [1, 2, 3, 4]
    assert NOTES == ["init 0", "controller cleanup"]


def test_controller_lives_in_the_controllers_process(run, transport):
    def main():
        askers = this_host().spawn_procs({"gpus": 2}).spawn("askers", Asker)
        seen = list(askers.where.call("placed").get().values())
        direct = get_or_spawn_controller("placed", Counter).get().where.call_one().get()
        return seen, direct, context().actor_instance.proc_id, os.getpid()

    seen, direct, root, pid = run(main)
    assert seen == [direct, direct]
    proc, controller_pid, name = direct
    assert proc == root
    assert "placed" in name
    if transport.real:
        assert controller_pid == pid


def test_failed_controller_is_reported_when_asked_for_again(run):
    def main():
        controller = get_or_spawn_controller("fragile", Counter).get()
        controller.fail.broadcast()
        # Its owner (the registry) heard of the failure before this answer was sent.
        with pytest.raises(SupervisionError):
            controller.incr.call_one().get()
        with pytest.raises(ActorError, match="controller 'fragile' has failed"):
            get_or_spawn_controller("fragile", Counter).get()
        return get_or_spawn_controller("sturdy", Counter).get().incr.call_one().get()

    assert run(main) == 1


def test_controllers_stop_after_the_controllers_meshes(run):
    def main():
        mesh = this_host().spawn_procs().spawn("user", UsesControllerInCleanup)
        mesh.ping.call_one().get()
        get_or_spawn_controller("notes", Counter).get()

    run(main)
    assert NOTES == ["init 0", "used by a cleanup", "controller cleanup"]


def test_get_or_spawn_controller_checks_its_arguments(run):
    def main():
        with pytest.raises(TypeError, match=r"subclass of danaus\.Actor"):
            get_or_spawn_controller("x", object)
        with pytest.raises(TypeError, match="Counter"):
            get_or_spawn_controller("x", Counter, 1, 2)
        return True

    assert run(main)


def test_ported_service_registry_example(run):
    """Monarch's documented service-discovery example, ported by changing its import."""
    from tests.programs import service_registry

    result = run(service_registry.main)
    assert result["round_robin"] == [
        "r0 done by worker 0",
        "r1 done by worker 1",
        "r2 done by worker 2",
        "r3 done by worker 0",
    ]
    assert result["with_failures"] == [
        "f0 done by worker 0",
        "f1 done by worker 0",
        "f2 done by worker 2",
        "f3 done by worker 0",
    ]
    assert result["flaky_health"] == {"healthy": 2, "total": 3}
    assert result["discovered"] == "via frontend done by worker 1"
    assert result["known"] == ["echo", "flaky"]
