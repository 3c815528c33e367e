"""What any exception from user code does, and where user code runs, on every transport."""

from __future__ import annotations

import asyncio
import os
import threading

import pytest

from danaus import (
    Accumulator,
    Actor,
    ActorError,
    Channel,
    MeshFailure,
    MeshStoppedError,
    Port,
    RemoteException,
    SerializationError,
    SupervisionError,
    current_rank,
    endpoint,
    this_host,
)
from danaus.chaos import crash
from tests.conformance.test_supervision import assert_no_more, record_root_failures


class Fatal(BaseException):
    """A user's own BaseException: not an Exception, so no handler meant for errors catches it."""


RAISED = {"Fatal": Fatal, "KeyboardInterrupt": KeyboardInterrupt, "GeneratorExit": GeneratorExit}


class Raiser(Actor):
    @endpoint
    def raise_sync(self, name: str) -> None:
        raise RAISED[name]("from a sync endpoint")

    @endpoint
    async def raise_async(self, name: str) -> None:
        raise RAISED[name]("from an async endpoint")

    @endpoint
    def ping(self) -> str:
        return "pong"


class Owner(Actor):
    """Owns a Raiser mesh and records what ``__supervise__`` hears."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self.child = this_host().spawn_procs({"c": 1}).spawn("raiser", Raiser)

    def __supervise__(self, failure: MeshFailure) -> bool:
        self.seen.append(failure.cause)
        return True

    @endpoint
    def fail_child(self, how: str, name: str) -> None:
        with pytest.raises(SupervisionError):
            getattr(self.child, how).call_one(name).get(timeout=30)

    @endpoint
    async def seen_causes(self) -> list[str]:
        for _ in range(3000):
            if self.seen:
                break
            await asyncio.sleep(0.01)
        return list(self.seen)


@pytest.mark.parametrize(
    ("how", "name"),
    [
        ("raise_sync", "Fatal"),
        ("raise_async", "Fatal"),
        ("raise_sync", "KeyboardInterrupt"),
        ("raise_async", "GeneratorExit"),
    ],
)
def test_a_base_exception_fails_the_actor_and_its_owner_is_told(run, how, name):
    def main():
        owner = this_host().spawn_procs({"o": 1}).spawn("owner", Owner)
        owner.fail_child.call_one(how, name).get(timeout=60)
        return owner.seen_causes.call_one().get(timeout=60)

    [cause] = run(main)
    assert f"raised {name}" in cause


def test_callers_waiting_on_an_actor_that_dies_of_a_base_exception_get_an_error(run):
    def main():
        failures = record_root_failures()
        raiser = this_host().spawn_procs({"r": 1}).spawn("raiser", Raiser)
        raiser.initialized.get(timeout=30)
        queued = [raiser.ping.call_one() for _ in range(3)]
        doomed = raiser.raise_async.call_one("Fatal")
        # A call made once the controller knows of the failure raises at once (on a real
        # transport the failure may be known that soon); one made before fails when awaited.
        after = []
        for _ in range(3):
            try:
                after.append(raiser.ping.call_one())
            except SupervisionError as refused:
                after.append(refused)
        with pytest.raises(SupervisionError):
            doomed.get(timeout=30)
        outcomes = []
        for future in after:
            if not isinstance(future, SupervisionError):
                with pytest.raises(SupervisionError):
                    future.get(timeout=30)
            outcomes.append("error")
        failure = failures.recv().get(timeout=30)
        assert_no_more(failures)
        return [f.get(timeout=30) for f in queued], outcomes, failure.cause

    answers, after, cause = run(main)
    assert answers == ["pong"] * 3 and after == ["error"] * 3
    assert "raised Fatal: from an async endpoint" in cause


class FatalInit(Actor):
    def __init__(self) -> None:
        raise Fatal("cannot start")

    @endpoint
    def ping(self) -> str:
        return "pong"


class FatalSupervisor(Actor):
    def __init__(self) -> None:
        self.calls = 0
        self.child = this_host().spawn_procs({"c": 1}).spawn("raiser", Raiser)

    def __supervise__(self, failure: MeshFailure) -> bool:
        self.calls += 1
        raise Fatal("supervisor gives up")

    @endpoint
    def break_child(self) -> None:
        self.child.raise_sync.broadcast("Fatal")


def test_a_base_exception_in_init_or_in_supervise_fails_the_actor(run):
    def main():
        failures = record_root_failures()
        broken = this_host().spawn_procs({"b": 1}).spawn("broken", FatalInit)
        with pytest.raises(SupervisionError):
            broken.ping.call_one().get(timeout=30)
        init_failure = failures.recv().get(timeout=30)
        boss = this_host().spawn_procs({"s": 1}).spawn("boss", FatalSupervisor)
        boss.break_child.call_one().get(timeout=30)
        boss_failure = failures.recv().get(timeout=30)
        assert_no_more(failures)
        return init_failure.cause, boss_failure.cause, boss_failure.chained.mesh_name

    init_cause, boss_cause, chained = run(main)
    assert init_cause == "__init__ raised Fatal: cannot start"
    assert boss_cause == "__supervise__ raised Fatal: supervisor gives up"
    assert chained == "raiser"


class Counter(Actor):
    @endpoint
    def one(self) -> int:
        return 1


def fold_fatally(total: int, value: int) -> int:
    raise Fatal("combine gave up")


def test_a_base_exception_in_an_accumulator_reaches_its_caller(run):
    def main():
        counters = this_host().spawn_procs({"c": 2}).spawn("counters", Counter)
        with pytest.raises(Fatal):
            Accumulator(counters.one, 0, fold_fatally).accumulate().get(timeout=30)
        return counters.one.call().get(timeout=30).item(c=1)

    assert run(main) == 1


class Inner(Exception):
    pass


class Outer(Exception):
    pass


class NeedsArgs(Exception):
    """Pickles, but cannot be rebuilt: its constructor wants two arguments."""

    def __init__(self, a: int, b: int) -> None:
        super().__init__(f"a={a} b={b}")


def _refuse_to_unpickle() -> None:
    raise RuntimeError("this value cannot be read back")


class Unreadable:
    def __reduce__(self):
        return (_refuse_to_unpickle, ())


class Chains(Actor):
    @endpoint
    def caused(self) -> None:
        try:
            raise Inner("the root cause")
        except Inner as inner:
            raise Outer("what the caller sees") from inner

    @endpoint
    def during(self) -> None:
        try:
            {}["missing"]
        except KeyError:
            raise Outer("while handling")  # noqa: B904 - the implicit context is the point

    @endpoint
    def needs_args(self) -> None:
        raise NeedsArgs(1, 2)

    @endpoint
    def unreadable(self) -> Unreadable:
        return Unreadable()


def test_chained_exceptions_keep_their_cause_and_context(run):
    def main():
        chains = this_host().spawn_procs({"c": 1}).spawn("chains", Chains)
        with pytest.raises(ActorError) as caused:
            chains.caused.call_one().get(timeout=30)
        with pytest.raises(ActorError) as during:
            chains.during.call_one().get(timeout=30)
        return caused.value, during.value

    caused, during = run(main)
    assert isinstance(caused.exception, Outer)
    assert isinstance(caused.exception.__cause__, Inner)
    assert str(caused.exception.__cause__) == "the root cause"
    text = str(caused)
    assert "Inner: the root cause" in text
    assert "The above exception was the direct cause of the following exception" in text
    remote = caused.traceback
    assert remote.index("Inner: the root cause") < remote.index("Outer: what the caller sees")
    assert isinstance(during.exception.__context__, KeyError)
    assert "During handling of the above exception, another exception occurred" in str(during)


def test_an_exception_that_cannot_be_rebuilt_still_says_what_it_was(run):
    def main():
        chains = this_host().spawn_procs({"c": 1}).spawn("chains", Chains)
        with pytest.raises(ActorError) as needs:
            chains.needs_args.call_one().get(timeout=30)
        with pytest.raises(SerializationError) as unreadable:
            chains.unreadable.call_one().get(timeout=30)
        return needs.value, str(unreadable.value)

    needs, unreadable = run(main)
    assert isinstance(needs.exception, RemoteException)
    assert needs.exception.type_name.endswith("NeedsArgs")
    assert needs.message.endswith("NeedsArgs: a=1 b=2")
    assert "chains[0]" in needs.actor
    assert "raise NeedsArgs(1, 2)" in needs.traceback
    assert "the answer of unreadable" in unreadable
    assert "this value cannot be read back" in unreadable


class OneThread(Actor):
    """Mixes sync and async endpoints; all of them run on the thread of ``__init__``."""

    def __init__(self) -> None:
        self.local = threading.local()
        self.local.count = 0
        self.thread = threading.get_ident()

    @endpoint
    def bump_sync(self) -> int:
        self.local.count += 1
        return self.local.count

    @endpoint
    async def bump_async(self) -> int:
        self.local.count += 1
        return self.local.count

    @endpoint
    def sees_a_loop(self) -> bool:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return False
        return True

    @endpoint
    async def same_thread(self) -> bool:
        return threading.get_ident() == self.thread


def test_an_actor_runs_on_one_thread(run):
    def main():
        actor = this_host().spawn_procs({"a": 1}).spawn("one", OneThread)
        counts = [actor.bump_sync.call_one().get(timeout=30) for _ in range(2)]
        counts += [actor.bump_async.call_one().get(timeout=30) for _ in range(2)]
        loop = actor.sees_a_loop.call_one().get(timeout=30)
        return counts, loop, actor.same_thread.call_one().get(timeout=30)

    assert run(main) == ([1, 2, 3, 4], False, True)


class Where(Actor):
    @endpoint
    def rank(self) -> str:
        return str(current_rank())

    @endpoint
    def fails(self) -> None:
        raise ValueError("no")

    @endpoint
    def exits_at(self, rank: int) -> int:
        if current_rank().rank == rank:
            os._exit(4)
        return rank


def test_ranks_and_reports_read_as_monarchs_do(run):
    def main():
        failures = record_root_failures()
        mesh = this_host().spawn_procs({"hosts": 1, "gpus": 2}).spawn("where", Where)
        ranks = list(mesh.rank.call().get(timeout=30).values())
        raisers = this_host().spawn_procs({"gpus": 2}).spawn("raiser", Raiser)
        raisers.slice(gpus=1).raise_sync.broadcast("Fatal")
        return ranks, failures.recv().get(timeout=30).report()

    ranks, report = run(main)
    assert ranks == ["{'hosts': 0/1, 'gpus': 0/2}", "{'hosts': 0/1, 'gpus': 1/2}"]
    first = report.splitlines()[0]
    raiser = "tests.conformance.test_user_code_errors.Raiser raiser{'gpus': 1/2}"
    assert first.startswith(f"The actor {raiser} and all its descendants have failed: ")
    assert "raised Fatal" in first
    assert "rank gpus=1" in report.splitlines()[1]


def test_errors_name_the_call_the_actor_and_the_rank_as_monarchs_do(run):
    """An endpoint's error names the call; a lost proc's, the actor by class, mesh and point;
    a failure's one line, the mesh and the index of the failed rank."""

    def main():
        failures = record_root_failures()
        mesh = this_host().spawn_procs({"gpus": 3}).spawn("where", Where)
        with pytest.raises(ActorError) as raised:
            mesh.slice(gpus=1).fails.call_one().get(timeout=30)
        with pytest.raises(SupervisionError) as lost:
            mesh.exits_at.call(2).get(timeout=30)
        return str(raised.value), raised.value.call, str(lost.value), str(failures.recv().get(30))

    error, call, lost, failure = run(main)
    assert error.startswith("Actor call where.fails failed: actor ") and call == "where.fails"
    assert "raised ValueError: no" in error
    assert "The actor Where where{'gpus': 2/3} on proc " in lost
    assert "and all its descendants have failed: " in lost and "Exited(code=4)" in lost
    assert failure.startswith("MeshFailure(mesh_name=where, crashed_ranks=[2], event=mesh ")


def test_calls_on_stopped_or_dead_meshes_raise_supervision_errors(run):
    def main():
        failures = record_root_failures()
        procs = this_host().spawn_procs({"r": 2})
        stopped = procs.spawn("stopped", Raiser)
        stopped.stop().get(timeout=30)
        with pytest.raises(SupervisionError):
            stopped.ping.call().get(timeout=30)
        dead_procs = this_host().spawn_procs({"r": 1})
        dead = dead_procs.spawn("dead", Raiser)
        dead.initialized.get(timeout=30)
        crash(dead)  # the kill is under way when crash returns: wait until it is reported
        assert failures.recv().get(timeout=30).mesh_name == "dead"
        with pytest.raises(SupervisionError):
            dead.ping.call_one().get(timeout=30)
        dead_procs.stop().get(timeout=30)
        procs.stop().get(timeout=30)
        with pytest.raises(MeshStoppedError):
            procs.spawn("late", Raiser)
        return "stopped"

    assert run(main) == "stopped"


class CleansUp(Actor):
    """Reports what its ``__cleanup__`` was given."""

    def __init__(self, notes: Port[str]) -> None:
        self.notes = notes

    @endpoint
    def fail(self) -> None:
        raise ValueError("no one waits for this")

    def __cleanup__(self, exc: BaseException | None) -> None:
        self.notes.send(f"{type(exc).__name__}: {exc}")


def test_a_failed_actor_runs_its_cleanup_with_the_exception_that_failed_it(run):
    def main():
        failures = record_root_failures()
        notes, cleaned = Channel.open()
        mesh = this_host().spawn_procs({"c": 1}).spawn("cleans", CleansUp, notes)
        mesh.fail.broadcast()
        note = cleaned.recv().get(timeout=30)
        failure = failures.recv().get(timeout=30)
        return note, "no one waits for this" in failure.cause

    assert run(main) == ("ValueError: no one waits for this", True)
