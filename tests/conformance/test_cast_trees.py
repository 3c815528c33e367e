"""Casts along deep trees: with a fan-out of 2, a cast to 7 procs passes through forwarding procs.

The tree of a cast to members 0..6 with ``cast_fanout=2`` (`danaus.core.casting`):
the caller sends to members 0 and 4; member 0 passes the call on to 1 and 3,
member 1 to 2, and member 4 to 5 and 6. Each
test runs its program with that fan-out and checks what a cast must do
whichever path its messages take: reach every live member once, in order
with the sender's other calls, answer straight to the caller, survive the
loss of a forwarding proc, and keep forwarding when a forwarder's actor is
gone.
"""

from __future__ import annotations

import operator

import pytest

import danaus
from danaus import (
    Accumulator,
    Actor,
    Channel,
    MeshFailure,
    MeshStoppedError,
    Port,
    PortReceiver,
    SerializationError,
    SupervisionError,
    UndeliverableMessageEnvelope,
    context,
    current_rank,
    endpoint,
    this_host,
)
from danaus.chaos import crash, pause
from danaus.core import config
from danaus.core.actor_mesh import placement_of
from danaus.core.serialize import dumps
from danaus.core.wire import MAX_SUBTREE, Call, Cast, encode

FANOUT = 2
MEMBERS = 7
FIRST_FORWARDER = 0
"""Gets the call from the caller and passes it on to members 1 to 3."""
SECOND_FORWARDER = 1
"""Gets the call from member 0 and passes it on to member 2."""
TIMEOUT = 60


class Member(Actor):
    """Notes every value it is sent, with who sent it."""

    def __init__(self) -> None:
        self.log: list[tuple[str, int]] = []

    @endpoint
    def note(self, sender: str, value: int) -> int:
        self.log.append((sender, value))
        return current_rank().rank

    @endpoint
    def notes(self) -> list[tuple[str, int]]:
        return self.log

    @endpoint
    def fanout(self) -> int:
        return config.current_world().options.cast_fanout

    @endpoint
    def stop_now(self) -> None:
        context().actor_instance.stop("stopped by the test")


class Caster(Actor):
    """Casts to a mesh it is given, from a worker's proc; hears of what comes back."""

    def __init__(self, returned: Port[str] | None = None) -> None:
        self.returned = returned

    @endpoint
    def fanout(self) -> int:
        return config.current_world().options.cast_fanout

    @endpoint
    def interleave(self, members: Member, rounds: int) -> list[int]:
        return interleave(members, "caster", rounds)

    @endpoint
    def broadcast(self, members: Member, value: int, then_read: slice) -> list[list]:
        """Broadcast ``value``, then read the notes of members ``then_read``, which this
        caster's broadcast reached first."""
        members.note.broadcast("caster", value)
        read = members.slice(m=then_read).notes.call().get(timeout=TIMEOUT)
        return list(read.values())

    def _handle_undeliverable_message(self, message: UndeliverableMessageEnvelope) -> bool:
        if self.returned is None:
            return False
        self.returned.send(message.dest())
        return True


def interleave(members: Member, sender: str, rounds: int) -> list[int]:
    """Send numbered values along the whole mesh's tree, another slice's tree and directly.

    Returns, for each member, how many values it was sent (in increasing order).
    """
    sent = [0] * MEMBERS
    value = 0

    def cast(ranks: range) -> None:
        nonlocal value
        members.slice(m=slice(ranks.start, ranks.stop)).note.broadcast(sender, value)
        for rank in ranks:
            sent[rank] += 1
        value += 1

    for round_ in range(rounds):
        cast(range(MEMBERS))
        one = round_ % MEMBERS
        members.slice(m=one).note.call_one(sender, value).get(timeout=TIMEOUT)
        sent[one] += 1
        value += 1
        cast(range(2, MEMBERS))
        cast(range(round_ % 3, round_ % 3 + 3))
    members.note.call(sender, value).get(timeout=TIMEOUT)
    return [count + 1 for count in sent]


def spawn_members() -> Member:
    members = this_host().spawn_procs({"m": MEMBERS}).spawn("members", Member)
    members.initialized.get(timeout=TIMEOUT)
    return members


def in_order_once(log: list[tuple[str, int]], sender: str) -> list[int]:
    values = [value for who, value in log if who == sender]
    assert values == sorted(set(values)), f"values from {sender} out of order or twice: {values}"
    return values


def outcomes(members: Member, value: int) -> tuple[list[int], list[BaseException]]:
    """Stream a call to every member: the ranks that answered, and the errors."""
    return settle(list(members.note.stream("root", value)))


def settle(futures: list) -> tuple[list[int], list[BaseException]]:
    answered, errors = [], []
    for future in futures:
        try:
            answered.append(future.get(timeout=TIMEOUT))
        except (SupervisionError, MeshStoppedError) as exc:
            errors.append(exc)
    return sorted(answered), errors


def logs_but(members: Member, gone: int) -> list[list[tuple[str, int]]]:
    """The notes of every member but ``gone`` (asked slice by slice around it)."""
    parts = [slice(0, gone), slice(gone + 1, MEMBERS)]
    return [
        log
        for part in parts
        if part.stop > part.start
        for log in members.slice(m=part).notes.call().get(timeout=TIMEOUT).values()
    ]


def record_root_failures() -> PortReceiver[MeshFailure]:
    port, receiver = Channel.open()
    danaus.unhandled_fault_hook = port.send
    return receiver


def test_every_adverb_reaches_every_member(run):
    def main():
        members = spawn_members()
        values = members.note.call("root", 0).get(timeout=TIMEOUT)
        streamed = sorted(f.get(timeout=TIMEOUT) for f in members.note.stream("root", 1))
        total = Accumulator(members.note, 0, operator.add).accumulate("root", 2)
        total = total.get(timeout=TIMEOUT)
        members.note.broadcast("root", 3)
        for value in (4, 5):
            members.note.choose("root", value).get(timeout=TIMEOUT)
        logs = list(members.notes.call().get(timeout=TIMEOUT).values())
        return list(values.values()), streamed, total, logs

    values, streamed, total, logs = run(main, cast_fanout=FANOUT)
    ranks = list(range(MEMBERS))
    assert values == ranks and streamed == ranks and total == sum(ranks)
    for rank, log in enumerate(logs):
        assert in_order_once(log, "root") == [0, 1, 2, 3, *([4 + rank] if rank < 2 else [])]


def test_a_senders_calls_arrive_in_order_along_trees_and_directly(run):
    def main():
        members = spawn_members()
        sent = interleave(members, "root", rounds=12)
        return sent, list(members.notes.call().get(timeout=TIMEOUT).values())

    sent, logs = run(main, cast_fanout=FANOUT)
    assert [len(in_order_once(log, "root")) for log in logs] == sent


def test_every_proc_of_the_job_casts_with_its_fanout(run):
    def main():
        members = spawn_members()
        caster = this_host().spawn_procs().spawn("caster", Caster)
        fanouts = {*members.fanout.call().get(timeout=TIMEOUT).values()}
        fanouts.add(caster.fanout.call_one().get(timeout=TIMEOUT))
        sent = caster.interleave.call_one(members, 8).get(timeout=TIMEOUT)
        return fanouts, sent, list(members.notes.call().get(timeout=TIMEOUT).values())

    fanouts, sent, logs = run(main, cast_fanout=FANOUT)
    assert fanouts == {FANOUT}
    assert [len(in_order_once(log, "caster")) for log in logs] == sent


@pytest.mark.parametrize("forwarder", [FIRST_FORWARDER, SECOND_FORWARDER])
def test_a_cast_reaches_every_live_member_when_a_forwarding_proc_is_killed(run, forwarder):
    def main():
        failures = record_root_failures()
        members = spawn_members()
        pending = list(members.note.stream("root", 0))
        crash(members.slice(m=forwarder))
        answered, errors = settle(pending)
        failure = failures.recv().get(timeout=TIMEOUT)
        for part in (slice(0, forwarder), slice(forwarder + 1, MEMBERS)):
            if part.stop > part.start:
                members.slice(m=part).note.broadcast("root", 1)
        return answered, len(errors), failure.rank.rank, logs_but(members, forwarder)

    answered, errors, failed, logs = run(main, cast_fanout=FANOUT)
    # The forwarder may have answered before it died; every other member answers.
    assert set(range(MEMBERS)) - {forwarder} <= set(answered)
    assert len(answered) + errors == MEMBERS
    assert failed == forwarder
    assert len(logs) == MEMBERS - 1
    assert all(in_order_once(log, "root") == [0, 1] for log in logs)


def test_a_paused_forwarding_proc_is_passed_by_once_declared_lost(run):
    def main():
        failures = record_root_failures()
        members = spawn_members()
        pause(members.slice(m=FIRST_FORWARDER))
        answered, errors = outcomes(members, 0)
        failure = failures.recv().get(timeout=TIMEOUT)
        return answered, errors, failure.rank.rank, logs_but(members, FIRST_FORWARDER)

    answered, errors, failed, logs = run(main, cast_fanout=FANOUT)
    # On a cluster the pause travels to the far host, and the call may get there first.
    assert set(range(1, MEMBERS)) <= set(answered) and failed == FIRST_FORWARDER
    assert len(answered) + len(errors) == MEMBERS
    assert all(isinstance(error, SupervisionError) for error in errors)
    assert all(in_order_once(log, "root") == [0] for log in logs)


@pytest.mark.parametrize(
    "fault, forwarder",
    [(pause, FIRST_FORWARDER), (crash, SECOND_FORWARDER)],
    ids=["pause", "crash"],
)
def test_a_broadcast_reaches_every_live_member_when_a_forwarding_proc_is_lost(
    run, fault, forwarder
):
    def main():
        failures = record_root_failures()
        members = spawn_members()
        if fault is pause:
            pause(members.slice(m=forwarder))
        members.note.broadcast("root", 0)
        if fault is crash:
            crash(members.slice(m=forwarder))
        failure = failures.recv().get(timeout=TIMEOUT)
        return failure.rank.rank, logs_but(members, forwarder)

    failed, logs = run(main, cast_fanout=FANOUT)
    assert failed == forwarder
    assert len(logs) == MEMBERS - 1
    assert all(in_order_once(log, "root") == [0] for log in logs)


def test_a_forwarding_proc_whose_actor_is_gone_still_forwards(run):
    def main():
        returned, receiver = Channel.open()
        members = spawn_members()
        caster = this_host().spawn_procs().spawn("caster", Caster, returned)
        members.slice(m=FIRST_FORWARDER).stop_now.call_one().get(timeout=TIMEOUT)
        answered, errors = outcomes(members, 0)
        others = slice(FIRST_FORWARDER + 1, MEMBERS)
        logs = caster.broadcast.call_one(members, 1, others).get(timeout=TIMEOUT)
        dest = receiver.recv().get(timeout=TIMEOUT)
        [proc] = {proc for proc, _ in placement_of(members.slice(m=FIRST_FORWARDER)).targets()}
        return answered, errors, dest, proc, logs

    answered, errors, dest, proc, logs = run(main, cast_fanout=FANOUT)
    assert answered == list(range(1, MEMBERS))
    assert len(errors) == 1 and "stopped" in str(errors[0])
    assert dest.startswith(f"{proc}/") and dest.endswith(".note")
    assert len(logs) == MEMBERS - 1
    assert all(in_order_once(log, "root") == [0] for log in logs)
    assert all(in_order_once(log, "caster") == [1] for log in logs)


@pytest.mark.parametrize("flaw", ["point out of range", "too many procs"])
def test_a_malformed_cast_is_refused_and_its_caller_told_for_every_rank(run, flaw):
    """A proc refuses a cast whose list of procs to pass it on to is malformed, answers
    its caller for itself and for each proc on the list it can read, and serves on."""

    def main():
        members = spawn_members()
        port, answers = Channel.open()
        runtime = context().actor_instance.runtime
        procs = [proc for proc, _ in placement_of(members).targets()]
        call = Call(
            placement_of(members).mesh_id, "note", port.ref, 0, ("m",), (MEMBERS,), "root/client", 0
        )
        if flaw == "point out of range":
            rest = (procs[1], procs[2]), (1, MEMBERS), (0, 0)
        else:
            count = MAX_SUBTREE + 1
            rest = (procs[1],) * count, (1,) * count, (0,) * count
        bad = Cast(call, runtime.proc_id, 10**9, FANOUT, *rest)
        runtime.transport.send(procs[0], encode(bad, dumps((("root", -1), {}))))
        told = []
        for _ in dict.fromkeys((0, *rest[1])):  # each rank it was for, once
            with pytest.raises(SerializationError) as refused:
                answers.recv().get(timeout=TIMEOUT)
            told.append(str(refused.value))
        values = list(members.note.call("root", 0).get(timeout=TIMEOUT).values())
        return told, values, list(members.slice(m=0).notes.call_one().get(timeout=TIMEOUT))

    told, values, log = run(main, cast_fanout=FANOUT)
    assert all("rejected the call" in why for why in told)
    assert values == list(range(MEMBERS))
    assert log == [("root", 0)]
