"""What an actor can do about itself: know its name, stop, abort; methods called via as_endpoint."""

from __future__ import annotations

import asyncio

import pytest

import danaus
from danaus import (
    Actor,
    ActorError,
    Channel,
    MeshStoppedError,
    Port,
    SupervisionError,
    as_endpoint,
    context,
    current_actor_name,
    endpoint,
    this_host,
)
from danaus.core.actor_mesh import placement_of


class Self(Actor):
    def __init__(self, notes: Port[str] | None = None) -> None:
        self.notes = notes
        self.handled = 0

    @endpoint
    def names(self) -> tuple[str, str]:
        return current_actor_name(), context().actor_instance.actor_id

    @endpoint
    def count(self) -> int:
        self.handled += 1
        return self.handled

    @endpoint
    def stop_me(self, reason: str) -> str:
        context().actor_instance.stop(reason)
        return "stopping"

    @endpoint
    def abort_me(self, reason: str | None) -> str:
        context().actor_instance.abort(reason)
        return "not this"

    @endpoint
    async def abort_me_async(self) -> None:
        context().actor_instance.abort("from async")
        await asyncio.Event().wait()

    def __cleanup__(self, exc: BaseException | None) -> None:
        if self.notes is not None:
            self.notes.send(f"cleanup after {self.handled}, {type(exc).__name__}")

    # Plain methods: reachable only through as_endpoint.
    def add(self, a: int, b: int = 1) -> int:
        return a + b

    async def add_later(self, a: int) -> int:
        await asyncio.sleep(0)
        return a + 100

    def add_through(self, port: Port[int], a: int) -> None:
        port.send(a * 2)


def record_root_failures():
    port, receiver = Channel.open()
    danaus.unhandled_fault_hook = port.send
    return receiver


def test_current_actor_name_is_the_actor_id(run):
    def main():
        mesh = this_host().spawn_procs({"gpus": 2}).spawn("named", Self)
        return list(mesh.names.call().get().values()), current_actor_name()

    (first, second), client = run(main)
    assert first[0] == first[1] and second[0] == second[1]
    assert "named" in first[0] and first[0] != second[0]
    assert client.endswith("/client")


def test_an_actor_stops_itself_after_the_message_it_handles(run):
    def main():
        failures = record_root_failures()
        port, notes = Channel.open()
        mesh = this_host().spawn_procs().spawn("stopper", Self, port)
        results = [mesh.count.call_one().get(), mesh.stop_me.call_one("work done").get()]
        cleanup = notes.recv().get()
        with pytest.raises(MeshStoppedError, match="work done"):
            mesh.count.call_one().get()
        with pytest.raises(TimeoutError):  # stopping is not a failure
            failures.recv().get(timeout=1.0)
        return results, cleanup

    assert run(main) == ([1, "stopping"], "cleanup after 1, NoneType")


@pytest.mark.parametrize("reason", ["test abort reason", None])
def test_an_actor_aborts_itself(run, reason):
    def main():
        failures = record_root_failures()
        port, notes = Channel.open()
        mesh = this_host().spawn_procs().spawn("aborter", Self, port)
        with pytest.raises(SupervisionError):
            mesh.abort_me.call_one(reason).get()
        with pytest.raises(SupervisionError):
            mesh.count.call_one().get()
        return failures.recv().get().report(), notes.recv().get()

    report, cleanup = run(main)
    assert (reason or "no reason provided") in report
    assert cleanup == "cleanup after 0, SupervisionError"


def test_an_async_endpoint_that_aborts_ends_at_its_next_await(run):
    def main():
        failures = record_root_failures()
        mesh = this_host().spawn_procs().spawn("aborter", Self)
        with pytest.raises(SupervisionError):
            mesh.abort_me_async.call_one().get()
        return failures.recv().get().cause

    assert run(main) == "aborted: from async"


def test_stop_and_abort_are_for_actors(run):
    def main():
        with pytest.raises(RuntimeError, match="for actors"):
            context().actor_instance.stop()
        with pytest.raises(RuntimeError, match="for actors"):
            context().actor_instance.abort("no")
        return True

    assert run(main)


def test_as_endpoint_calls_plain_methods(run):
    def main():
        mesh = this_host().spawn_procs({"gpus": 2}).spawn("plain", Self)
        summed = list(as_endpoint(mesh.add).call(2, b=3).get().values())
        later = as_endpoint(mesh.slice(gpus=1).add_later).call_one(1).get()
        through = as_endpoint(mesh.add_through, explicit_response_port=True).choose(21).get()
        return summed, later, through

    assert run(main) == ([5, 5], 101, 42)


def test_plain_methods_are_not_endpoints(run):
    def main():
        mesh = this_host().spawn_procs().spawn("plain", Self)
        with pytest.raises(RuntimeError, match="not an endpoint"):
            mesh.add(1)
        with pytest.raises(ValueError, match="not an endpoint"):
            as_endpoint(mesh.count)
        with pytest.raises(TypeError, match="add"):
            as_endpoint(mesh.add).call_one()
        with pytest.raises(AttributeError):
            mesh.missing  # noqa: B018
        return as_endpoint(mesh.add).call_one(1).get()

    assert run(main) == 2


def test_a_call_to_a_plain_method_by_name_is_refused(run):
    """A plain method is reached only through as_endpoint, not by forging an endpoint call."""

    def main():
        mesh = this_host().spawn_procs().spawn("plain", Self)
        forged = danaus.Endpoint(placement_of(mesh), mesh._endpoints["add"])
        with pytest.raises(ActorError, match="has no endpoint 'add'"):
            forged.call_one(1).get()
        return True

    assert run(main)
