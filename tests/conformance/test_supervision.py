"""Failures: what callers see, what owners are told, and how failures climb the tree."""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

import danaus
from danaus import (
    Actor,
    ActorError,
    Channel,
    MeshFailure,
    Port,
    PortReceiver,
    ProcMesh,
    RestartPolicy,
    SupervisionError,
    current_rank,
    endpoint,
    this_host,
)
from danaus.chaos import crash, pause

ROOT = Path(__file__).resolve().parents[2]


def record_root_failures() -> PortReceiver[MeshFailure]:
    """Replace the root's fault hook with one that sends each failure to a port."""
    port, receiver = Channel.open()
    danaus.unhandled_fault_hook = port.send
    return receiver


def assert_no_more(receiver: PortReceiver[MeshFailure]) -> None:
    with pytest.raises(TimeoutError):
        receiver.recv().get(timeout=1.0)


class Worker(Actor):
    def __init__(self, fail_init: bool = False, inits: Port[int] | None = None) -> None:
        if fail_init:
            raise RuntimeError("cannot start")
        self.count = 0
        if inits is not None:
            inits.send(current_rank().rank)

    @endpoint
    def ping(self) -> int:
        self.count += 1
        return self.count

    @endpoint
    def boom(self) -> None:
        raise ValueError("boom")

    @endpoint
    def exit(self, code: int) -> None:
        sys.exit(code)

    @endpoint
    async def nap(self, seconds: float) -> str:
        await asyncio.sleep(seconds)
        return "rested"


class Owner(Actor):
    """Owns a mesh of workers; its __supervise__ reports and answers as told."""

    def __init__(self, mode: str, reports: Port[str]) -> None:
        self.mode = mode
        self.reports = reports
        self.children = this_host().spawn_procs({"w": 2}).spawn("kids", Worker)

    def __supervise__(self, failure: MeshFailure) -> bool:
        self.reports.send(f"{failure.mesh_name} {dict(failure.rank)} {failure.cause}")
        if self.mode == "raise":
            raise KeyError("supervise broke")
        return self.mode == "handle"

    @endpoint
    def break_child(self, rank: int) -> None:
        self.children.slice(w=rank).boom.broadcast()

    @endpoint
    def ping_child(self, rank: int) -> int:
        return self.children.slice(w=rank).ping.call_one().get()


class AsyncOwner(Owner):
    async def __supervise__(self, failure: MeshFailure) -> bool:
        await asyncio.sleep(0.01)
        self.reports.send(f"async {failure.cause}")
        return True


class Middle(Actor):
    """Owns one Owner that escalates: a grandchild's failure climbs through it."""

    def __init__(self, reports: Port[str]) -> None:
        self.owner = this_host().spawn_procs().spawn("owner", Owner, "escalate", reports)

    @endpoint
    def break_grandchild(self) -> None:
        self.owner.break_child.call_one(1).get()


def test_endpoint_raise_under_call_is_an_actor_error_and_no_failure(run):
    def main():
        failures = record_root_failures()
        workers = this_host().spawn_procs({"w": 2}).spawn("w", Worker)
        with pytest.raises(ActorError, match="boom"):
            workers.boom.call().get()
        assert list(workers.ping.call().get().values()) == [1, 1]
        assert_no_more(failures)
        return True

    assert run(main)


def test_endpoint_raise_under_broadcast_fails_the_actor_and_tells_the_owner(run):
    def main():
        failures = record_root_failures()
        workers = this_host().spawn_procs({"w": 3}).spawn("w", Worker)
        workers.slice(w=1).boom.broadcast()
        failure = failures.recv().get(timeout=30)
        with pytest.raises(SupervisionError):
            workers.slice(w=1).ping.call_one().get(timeout=30)
        with pytest.raises(SupervisionError, match="failed"):
            workers.ping.call()
        survivors = workers.slice(w=slice(0, 1))
        assert survivors.ping.call_one().get(timeout=30) == 1
        assert workers.slice(w=2).ping.call_one().get(timeout=30) == 1
        assert_no_more(failures)
        return failure

    failure = run(main)
    assert failure.mesh_name == "w"
    assert dict(failure.rank) == {"w": 1}
    assert "ValueError: boom" in failure.cause
    assert "boom" in (failure.traceback or "")
    assert failure.proc and failure.host
    report = failure.report()
    assert "rank w=1" in report and "ValueError: boom" in report


def test_init_failure_fails_calls_and_tells_the_owner(run):
    def main():
        failures = record_root_failures()
        workers = this_host().spawn_procs({"w": 2}).spawn("w", Worker, True)
        with pytest.raises(SupervisionError):
            workers.ping.call().get(timeout=30)
        first = failures.recv().get(timeout=30)
        second = failures.recv().get(timeout=30)
        assert_no_more(failures)
        return sorted([dict(first.rank)["w"], dict(second.rank)["w"]]), first.cause

    ranks, cause = run(main)
    assert ranks == [0, 1]
    assert "__init__ raised RuntimeError: cannot start" in cause


def test_process_exit_fails_pending_calls_and_tells_the_owner(run):
    def main():
        failures = record_root_failures()
        workers = this_host().spawn_procs({"w": 2}).spawn("w", Worker)
        workers.slice(w=0).exit.broadcast(3)
        pending = workers.slice(w=0).ping.call_one()
        with pytest.raises(SupervisionError):
            pending.get(timeout=30)
        failure = failures.recv().get(timeout=30)
        assert workers.slice(w=1).ping.call_one().get(timeout=30) == 1
        assert_no_more(failures)
        return failure

    failure = run(main)
    assert failure.exit_code == 3
    assert dict(failure.rank) == {"w": 0}


def test_killed_process_fails_pending_calls_at_once(run):
    def main():
        failures = record_root_failures()
        workers = this_host().spawn_procs({"w": 3}).spawn("w", Worker)
        workers.initialized.get(timeout=30)
        pending = workers.slice(w=2).nap.call_one(30.0)
        crash(workers.slice(w=2))
        with pytest.raises(SupervisionError):
            pending.get(timeout=30)
        failure = failures.recv().get(timeout=30)
        assert list(workers.slice(w=slice(0, 2)).ping.call().get(timeout=30).values()) == [1, 1]
        assert_no_more(failures)
        return failure

    failure = run(main)
    assert failure.signal == 9
    assert dict(failure.rank) == {"w": 2}


def test_paused_process_is_declared_lost_by_heartbeat(run):
    def main():
        failures = record_root_failures()
        workers = this_host().spawn_procs({"w": 2}).spawn("w", Worker)
        workers.initialized.get(timeout=30)
        pending = workers.slice(w=1).ping.call_one()
        pause(workers.slice(w=1))
        pending.exception(timeout=60)
        failure = failures.recv().get(timeout=60)
        assert workers.slice(w=0).ping.call_one().get(timeout=30) == 1
        return failure

    failure = run(main)
    assert "heartbeats" in failure.cause
    assert dict(failure.rank) == {"w": 1}


@pytest.mark.parametrize("mode", ["handle", "escalate", "raise"])
def test_supervise_handles_escalates_or_raises(run, mode):
    def main():
        failures = record_root_failures()
        reports, seen = Channel.open()
        owner = this_host().spawn_procs().spawn("owner", Owner, mode, reports)
        owner.break_child.call_one(0).get(timeout=30)
        report = seen.recv().get(timeout=30)
        if mode == "handle":
            assert owner.ping_child.call_one(1).get(timeout=30) == 1
            assert_no_more(failures)
            return report, None
        return report, failures.recv().get(timeout=30)

    report, root_failure = run(main)
    assert report.startswith("kids {'w': 0}") and "boom" in report
    if mode == "handle":
        return
    assert root_failure.mesh_name == "owner"
    assert root_failure.chained is not None and root_failure.chained.mesh_name == "kids"
    if mode == "raise":
        assert "__supervise__ raised KeyError" in root_failure.cause
    else:
        assert "did not handle" in root_failure.cause


def test_async_supervise(run):
    def main():
        reports, seen = Channel.open()
        owner = this_host().spawn_procs().spawn("owner", AsyncOwner, "handle", reports)
        owner.break_child.call_one(1).get(timeout=30)
        return seen.recv().get(timeout=30), owner.ping_child.call_one(0).get(timeout=30)

    report, pong = run(main)
    assert report.startswith("async endpoint boom")
    assert pong == 1


def test_grandchild_failure_climbs_two_levels(run):
    def main():
        failures = record_root_failures()
        reports, seen = Channel.open()
        middle = this_host().spawn_procs().spawn("middle", Middle, reports)
        middle.break_grandchild.call_one().get(timeout=30)
        seen.recv().get(timeout=30)
        failure = failures.recv().get(timeout=30)
        assert_no_more(failures)
        return failure

    failure = run(main)
    chain = []
    link = failure
    while link is not None:
        chain.append(link.mesh_name)
        link = link.chained
    assert chain == ["middle", "owner", "kids"]
    assert "caused by: mesh 'kids'" in failure.report()


def test_default_hook_exits_the_controller_with_a_report(controller_environment, tmp_path):
    """...having killed its workers and run the program's ``atexit`` handlers, as a program
    that ends on an exception would."""
    script = tmp_path / "fail_fast.py"
    marker = tmp_path / "marker"
    script.write_text(
        f"""
import atexit, sys
sys.path.insert(0, {str(ROOT)!r})
from danaus import this_host
from tests.conformance.test_supervision import Worker

atexit.register(lambda: open({str(marker)!r}, "w").write("finalized"))
workers = this_host().spawn_procs({{"w": 2}}).spawn("w", Worker)
workers.slice(w=1).boom.broadcast()
while True:
    workers.slice(w=0).nap.call_one(0.5).get()
"""
    )
    result = subprocess.run(
        [sys.executable, str(script)],
        env={**os.environ, **controller_environment},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1, result.stderr
    assert "unhandled failure" in result.stderr
    assert "mesh 'w' rank w=1" in result.stderr
    assert "ValueError: boom" in result.stderr
    assert marker.read_text() == "finalized", "the atexit handler ran"


def test_restart_one_for_one(run):
    def main():
        failures = record_root_failures()
        inits, started = Channel.open()
        policy = RestartPolicy("one_for_one", max_restarts=3, backoff=0.05, jitter=0)
        workers = this_host().spawn_procs({"w": 3}).spawn("w", Worker, False, inits, restart=policy)
        assert sorted(started.recv().get(timeout=30) for _ in range(3)) == [0, 1, 2]
        workers.ping.call().get(timeout=30)
        pending = workers.slice(w=1).nap.call_one(30.0)
        crash(workers.slice(w=1))
        with pytest.raises(SupervisionError):
            pending.get(timeout=30)
        assert started.recv().get(timeout=30) == 1
        after = list(workers.ping.call().get(timeout=30).values())
        assert_no_more(failures)
        return after

    assert run(main) == [2, 1, 2]


def test_restart_one_for_all(run):
    def main():
        inits, started = Channel.open()
        policy = RestartPolicy("one_for_all", max_restarts=3, backoff=0.05, jitter=0)
        workers = this_host().spawn_procs({"w": 3}).spawn("w", Worker, False, inits, restart=policy)
        assert sorted(started.recv().get(timeout=30) for _ in range(3)) == [0, 1, 2]
        workers.ping.call().get(timeout=30)
        workers.slice(w=0).boom.broadcast()
        assert sorted(started.recv().get(timeout=30) for _ in range(3)) == [0, 1, 2]
        return list(workers.ping.call().get(timeout=30).values())

    assert run(main) == [1, 1, 1]


def test_restarts_escalate_after_the_limit(run):
    def main():
        failures = record_root_failures()
        inits, started = Channel.open()
        policy = RestartPolicy("one_for_one", max_restarts=1, window=600, backoff=0.05)
        workers = this_host().spawn_procs({"w": 2}).spawn("w", Worker, False, inits, restart=policy)
        for _ in range(2):
            started.recv().get(timeout=30)
        workers.slice(w=0).boom.broadcast()
        assert started.recv().get(timeout=30) == 0
        workers.slice(w=0).boom.broadcast()
        failure = failures.recv().get(timeout=30)
        with pytest.raises(SupervisionError):
            workers.slice(w=0).ping.call_one()
        return failure

    failure = run(main)
    assert dict(failure.rank) == {"w": 0}


def test_restart_waits_for_its_backoff(run):
    async def main():
        loop = asyncio.get_running_loop()
        inits, started = Channel.open()
        policy = RestartPolicy("one_for_one", max_restarts=2, backoff=2.0, jitter=0)
        workers = this_host().spawn_procs({"w": 2}).spawn("w", Worker, False, inits, restart=policy)
        for _ in range(2):
            await asyncio.wait_for(started.recv(), 30)
        workers.slice(w=1).boom.broadcast()
        with pytest.raises(SupervisionError):
            await asyncio.wait_for(workers.slice(w=1).ping.call_one(), 30)
        failed_at = loop.time()
        await asyncio.sleep(1.0)
        with pytest.raises(SupervisionError):
            workers.slice(w=1).ping.call_one()
        assert await asyncio.wait_for(started.recv(), 30) == 1
        restarted_after = loop.time() - failed_at
        return restarted_after, await asyncio.wait_for(workers.slice(w=1).ping.call_one(), 30)

    waited, pong = run(main)
    assert waited >= 1.9
    assert pong == 1


class Stuck(Actor):
    def __init__(self, cleanups: Port[str]) -> None:
        self.cleanups = cleanups

    @endpoint
    async def hang(self) -> None:
        await asyncio.sleep(3600)

    def __cleanup__(self, exc: BaseException | None) -> None:
        self.cleanups.send("cleaned")


def test_stop_is_not_a_failure(run):
    def main():
        failures = record_root_failures()
        cleanups, cleaned = Channel.open()
        procs = this_host().spawn_procs({"w": 2})
        mesh = procs.spawn("s", Stuck, cleanups)
        mesh.stop().get(timeout=30)
        assert [cleaned.recv().get(timeout=30) for _ in range(2)] == ["cleaned"] * 2
        procs.stop().get(timeout=30)
        assert_no_more(failures)
        return True

    assert run(main)


class Tenant(Actor):
    """Spawns a mesh of its own on procs it was given (a proc mesh the controller owns)."""

    @endpoint
    def settle_on(self, procs: ProcMesh) -> int:
        self.workers = procs.spawn("tenants_workers", Worker)
        return self.workers.ping.call_one().get(timeout=30)

    @endpoint
    def call_workers(self) -> str:
        try:
            self.workers.ping.call_one().get(timeout=30)
        except SupervisionError as exc:
            return type(exc).__name__
        return "answered"


def test_procs_stopped_by_their_owner_read_as_stopped_to_the_owners_of_their_actors(run):
    """The controller stops a proc mesh on which an actor of another mesh spawned actors of
    its own: that actor is not told of a failure, and its calls there read as stopped."""

    def main():
        failures = record_root_failures()
        tenant = this_host().spawn_procs({"w": 1}).spawn("tenant", Tenant)
        lent = this_host().spawn_procs({"w": 1})
        assert tenant.settle_on.call_one(lent).get(timeout=30) == 1
        lent.stop().get(timeout=30)
        answer = tenant.call_workers.call_one().get(timeout=30)
        assert_no_more(failures)
        return answer

    assert run(main) == "MeshStoppedError"


def test_stop_gives_up_on_actors_that_never_finish(run):
    def main():
        failures = record_root_failures()
        cleanups, cleaned = Channel.open()
        procs = this_host().spawn_procs({"w": 2})
        mesh = procs.spawn("s", Stuck, cleanups)
        mesh.initialized.get(timeout=30)
        mesh.hang.broadcast()
        procs.stop(timeout=0.5).get(timeout=60)
        with pytest.raises(danaus.MeshStoppedError):
            mesh.hang.broadcast()
        assert_no_more(failures)
        with pytest.raises(TimeoutError):
            cleaned.recv().get(timeout=0.5)
        return True

    assert run(main)


class Lingering(Actor):
    """Says when its ``__cleanup__`` begins; the member at ``stuck`` then never ends it."""

    def __init__(self, cleanups: Port[int], stuck: int) -> None:
        self.cleanups = cleanups
        self.stuck = stuck
        self.rank = current_rank().rank

    @endpoint
    def ping(self) -> int:
        return self.rank

    def __cleanup__(self, exc: BaseException | None) -> None:
        self.cleanups.send(self.rank)
        if self.rank == self.stuck:
            _, never = Channel.open()
            never.recv().get()


def lost_members(stopped: danaus.Stopped) -> list[tuple[str, dict[str, int]]]:
    return [(member.mesh, dict(member.rank)) for member in stopped.lost]


def skipped_lines(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [
        (r.levelno, r.getMessage())
        for r in caplog.records
        if r.name == "danaus.supervision" and "skipped" in r.getMessage()
    ]


def test_a_stop_skips_a_proc_lost_before_it_and_names_it(run, caplog):
    """The loss was reported when it happened: the stop's line is news to nobody."""
    caplog.set_level(logging.INFO, "danaus.supervision")

    def main():
        failures = record_root_failures()
        cleanups, cleaned = Channel.open()
        procs = this_host().spawn_procs({"w": 3})
        procs.spawn("l", Lingering, cleanups, -1).initialized.get(timeout=30)
        crash(procs.slice(w=1))
        assert dict(failures.recv().get(timeout=30).rank) == {"w": 1}
        stopped = procs.stop().get(timeout=60)
        assert sorted(cleaned.recv().get(timeout=30) for _ in range(2)) == [0, 2]
        assert_no_more(failures)
        return lost_members(stopped), stopped.lost[0].loss.signal

    assert run(main) == ([("procs", {"w": 1})], 9)
    [(level, line)] = skipped_lines(caplog)
    assert level == logging.INFO and "proc mesh 'procs' skipped 1 lost member(s)" in line


def test_a_stop_skips_a_proc_lost_while_it_runs_and_names_it(run, caplog):
    """Nothing else reports that loss: the stop's line is a warning."""
    caplog.set_level(logging.INFO, "danaus.supervision")

    def main():
        failures = record_root_failures()
        cleanups, cleaned = Channel.open()
        procs = this_host().spawn_procs({"w": 3})
        procs.spawn("l", Lingering, cleanups, 1).initialized.get(timeout=30)
        stopping = procs.stop()
        assert sorted(cleaned.recv().get(timeout=30) for _ in range(3)) == [0, 1, 2]
        crash(procs.slice(w=1))  # its __cleanup__ never ends: the stop waits on it
        stopped = stopping.get(timeout=60)
        assert_no_more(failures)
        return lost_members(stopped)

    assert run(main) == [("procs", {"w": 1})]
    [(level, line)] = skipped_lines(caplog)
    assert level == logging.WARNING and "procs rank w=1" in line


def test_a_stop_of_an_actor_mesh_skips_members_whose_proc_was_lost(run):
    def main():
        failures = record_root_failures()
        cleanups, cleaned = Channel.open()
        mesh = this_host().spawn_procs({"w": 2}).spawn("l", Lingering, cleanups, -1)
        mesh.initialized.get(timeout=30)
        crash(mesh.slice(w=0))
        failures.recv().get(timeout=30)
        stopped = mesh.stop().get(timeout=60)
        assert cleaned.recv().get(timeout=30) == 1
        again = mesh.stop().get(timeout=60)
        return lost_members(stopped), again.lost

    assert run(main) == ([("l", {"w": 0})], ())


def test_a_restarted_members_lost_process_is_reported_under_its_new_id(run):
    def main():
        failures = record_root_failures()
        inits, started = Channel.open()
        policy = RestartPolicy("one_for_one", max_restarts=1, window=600, backoff=0.05, jitter=0)
        workers = this_host().spawn_procs({"w": 2}).spawn("w", Worker, False, inits, restart=policy)
        for _ in range(2):
            started.recv().get(timeout=30)
        crash(workers.slice(w=1))
        assert started.recv().get(timeout=30) == 1
        crash(workers.slice(w=1))
        return failures.recv().get(timeout=30)

    failure = run(main)
    assert dict(failure.rank) == {"w": 1}
    assert failure.actor_id.endswith("/w[1]~1")


class WatchfulOwner(Actor):
    """Spawns children inside an async endpoint and is told of their failures while it waits."""

    def __init__(self, handle: bool) -> None:
        self.handle = handle
        self.seen: list[str] = []

    def __supervise__(self, failure: MeshFailure) -> bool:
        self.seen.append(failure.mesh_name)
        return self.handle

    @endpoint
    async def fail_a_child_and_wait(self, how: str) -> list[str]:
        children = this_host().spawn_procs({"c": 1}).spawn("children", Worker)
        other = this_host().spawn_procs({"c": 1}).spawn("other", Worker)
        await children.initialized
        children.boom.broadcast()
        for _ in range(3000):
            if self.seen:
                break
            if how == "sleep":
                await asyncio.sleep(0.01)
            else:
                await other.ping.call_one()
        return list(self.seen)


@pytest.mark.parametrize("how", ["sleep", "call"])
def test_supervise_runs_while_the_owner_awaits_in_an_async_endpoint(run, how):
    """A failure reaches ``__supervise__`` at the owner's next await, not after the endpoint."""

    def main():
        owner = this_host().spawn_procs({"o": 1}).spawn("owner", WatchfulOwner, True)
        return owner.fail_a_child_and_wait.call_one(how).get(timeout=60)

    assert run(main) == ["children"]


def test_an_owner_that_gives_up_while_awaiting_fails_its_pending_call(run):
    def main():
        failures = record_root_failures()
        owner = this_host().spawn_procs({"o": 1}).spawn("owner", WatchfulOwner, False)
        with pytest.raises(SupervisionError):
            owner.fail_a_child_and_wait.call_one("sleep").get(timeout=60)
        failure = failures.recv().get(timeout=30)
        return failure.mesh_name, failure.chained.mesh_name

    assert run(main) == ("owner", "children")
