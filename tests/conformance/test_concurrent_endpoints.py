"""concurrent_endpoint: bodies that run as tasks, so the actor takes its next message."""

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
    concurrent_endpoint,
    endpoint,
    this_host,
)


class Gate(Actor):
    """``wait`` blocks until ``release``, which a later message sends."""

    def __init__(self) -> None:
        self.opened = asyncio.Event()
        self.started: list[int] = []

    @concurrent_endpoint
    async def wait(self, n: int) -> int:
        self.started.append(n)
        await self.opened.wait()
        return n

    @endpoint
    async def release(self) -> list[int]:
        self.opened.set()
        return self.started

    @concurrent_endpoint(explicit_response_port=True)
    async def wait_port(self, port: Port[str], text: str) -> None:
        await self.opened.wait()
        port.send(text.upper())

    @concurrent_endpoint
    async def fail(self) -> None:
        await asyncio.sleep(0)
        raise ValueError("concurrent body failed")

    @concurrent_endpoint(explicit_response_port=True)
    async def fail_port(self, port: Port[str]) -> None:
        await asyncio.sleep(0)
        raise ValueError("explicit-port body failed")

    @endpoint
    def ping(self) -> str:
        return "pong"


class GateChild(Gate):
    """Inherits the concurrent endpoints."""


class Lingering(Actor):
    """A body that never ends by itself; cleanup reports whether it was cancelled first."""

    def __init__(self, notes: Port[str]) -> None:
        self.notes = notes

    @concurrent_endpoint
    async def forever(self) -> None:
        try:
            await asyncio.Event().wait()
        finally:
            self.notes.send("body cancelled")

    @endpoint
    def ping(self) -> str:
        return "pong"

    def __cleanup__(self, exc: BaseException | None) -> None:
        self.notes.send("cleanup")


@pytest.mark.parametrize("cls", [Gate, GateChild])
def test_later_messages_run_while_a_body_waits(run, cls):
    def main():
        gate = this_host().spawn_procs().spawn("gate", cls)
        first, second = gate.wait.call_one(1), gate.wait.call_one(2)
        port_answer = gate.wait_port.call_one("x")
        started = gate.release.call_one().get()
        return started, first.get(), second.get(), port_answer.get()

    assert run(main) == ([1, 2], 1, 2, "X")


def test_exception_in_a_body_goes_to_the_caller(run):
    def main():
        gate = this_host().spawn_procs().spawn("gate", Gate)
        with pytest.raises(ActorError, match="concurrent body failed") as raised:
            gate.fail.call_one().get()
        return str(raised.value), raised.value.call, gate.ping.call_one().get()

    message, call, pong = run(main)
    assert message.startswith("Actor call gate.fail failed: actor ") and call == "gate.fail"
    assert pong == "pong"


def test_exception_in_an_explicit_port_body_fails_the_actor(run):
    def main():
        failures, hook = Channel.open()
        danaus.unhandled_fault_hook = failures.send
        gate = this_host().spawn_procs().spawn("gate", Gate)
        with pytest.raises(SupervisionError):
            gate.fail_port.call_one().get()
        return hook.recv().get().cause

    assert "explicit-port body failed" in run(main)


def test_stop_cancels_bodies_before_cleanup_and_answers_their_callers(run):
    def main():
        port, notes = Channel.open()
        mesh = this_host().spawn_procs().spawn("lingering", Lingering, port)
        pending = mesh.forever.call_one()
        mesh.ping.call_one().get()  # the body has started
        mesh.stop().get()
        with pytest.raises(MeshStoppedError):
            pending.get()
        return [notes.recv().get(), notes.recv().get()]

    assert run(main) == ["body cancelled", "cleanup"]


def test_concurrent_endpoint_refuses_sync_methods_and_endpoints():
    with pytest.raises(ValueError, match="only wrap async"):

        class Sync(Actor):
            @concurrent_endpoint
            def nope(self) -> None: ...

    with pytest.raises(ValueError, match="does not wrap @endpoint"):

        class Stacked(Actor):
            @concurrent_endpoint
            @endpoint
            async def nope(self) -> None: ...
