"""Small scenarios for testing the chaos toolkit itself (each breaks one rule on purpose)."""

from __future__ import annotations

import asyncio
import itertools
import os
import random
import signal
from pathlib import Path

from danaus import Actor, RestartPolicy, endpoint, hosts, this_host
from danaus.chaos import TIMING_KINDS, History, Scenario
from danaus.core import config


class Sleeper(Actor):
    def __init__(self) -> None:
        self.count = 0

    @endpoint
    async def forever(self) -> None:
        await asyncio.Event().wait()

    @endpoint
    def ping(self) -> int:
        self.count += 1
        return self.count


class Calm(Scenario):
    """Three workers answer pings; nothing is wrong with it."""

    hosts = 1
    duration = 2.0
    settle = 2.0
    kinds = ("crash", "pause")

    async def run(self, history: History) -> None:
        workers = (
            this_host()
            .spawn_procs({"w": 3})
            .spawn("w", Sleeper, restart=RestartPolicy(max_restarts=10, backoff=0.01))
        )
        # Twenty rounds, then on until the workers answer again (a restart after
        # the last fault takes what it takes on a busy machine), for at most 30 s.
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        for round_ in itertools.count():
            op = history.invoke("ping")
            try:
                await asyncio.wait_for(workers.ping.call(), 3)
            except Exception as exc:
                history.fail(op, repr(exc))
            else:
                history.ok(op)
                if round_ >= 19:
                    return
            if round_ >= 19 and loop.time() > deadline:
                return
            await asyncio.sleep(0.1)


class LeavesACallPending(Calm):
    """Calls an endpoint that never returns and walks away: liveness must object."""

    async def run(self, history: History) -> None:
        sleeper = this_host().spawn_procs().spawn("s", Sleeper)
        sleeper.forever.call_one()
        await asyncio.sleep(0.1)


class LeavesAnActorStuck(Calm):
    """An actor stuck in an endpoint no one waits for: survivors must object."""

    async def run(self, history: History) -> None:
        sleeper = this_host().spawn_procs().spawn("s", Sleeper)
        sleeper.forever.broadcast()
        await asyncio.sleep(0.1)


class BreaksItsInvariant(Calm):
    def check(self, history: History) -> list[str]:
        return ["the invariant does not hold"]


class FailsTwoWays(Calm):
    """Each seed breaks one of two invariants, or neither, as its random draw says: a run over
    many seeds has two groups of failures, whose messages differ from seed to seed."""

    async def run(self, history: History) -> None:
        sleeper = this_host().spawn_procs({"s": 2}).spawn("s", Sleeper)
        await sleeper.ping.call()
        history.record("drew", way=random.randrange(3), key=random.randrange(100))

    def check(self, history: History) -> list[str]:
        drawn = next(e for e in history.events if e["kind"] == "drew")
        key = drawn["key"]
        if drawn["way"] == 1:
            return [f"acknowledged write k{key}={key} lost", f"acknowledged write k{key + 1} lost"]
        if drawn["way"] == 2:
            return [f"counter went back from {key + 1} to {key}"]
        return []


DIES_AT = "DANAUS_TEST_DIES_AT"
"""``SEED:FILE``: `DiesOnce` kills its process at that seed while the file exists, removing it."""


class DiesOnce(FailsTwoWays):
    """`FailsTwoWays`, whose process is killed at one seed, once (as a node might die), when
    `DIES_AT` says so."""

    async def run(self, history: History) -> None:
        seed, _, marker = os.environ.get(DIES_AT, "").partition(":")
        if marker and config.current_world().seed == int(seed) and Path(marker).exists():
            Path(marker).unlink()
            os.kill(os.getpid(), signal.SIGKILL)
        await super().run(history)


class ReadsTheWallClock(Calm):
    """Decides what to send from os.urandom: not replayable, determinism must object."""

    async def run(self, history: History) -> None:
        sleeper = this_host().spawn_procs().spawn("s", Sleeper)
        for _ in range(1 + os.urandom(1)[0] % 5):
            await sleeper.ping.call_one()


class Thrower(Actor):
    @endpoint
    def work(self, x: int) -> int:
        return x

    @endpoint
    async def work_async(self, x: int) -> int:
        await asyncio.sleep(0.01)
        return x


class ThrowsFromUserCode(Scenario):
    """User code raises Exceptions and BaseExceptions at chosen calls: no call may wait forever.

    The workload awaits every call without a timeout, so a call left hanging
    stalls the run, which the liveness checker reports.
    """

    hosts = 2
    duration = 2.0
    settle = 3.0
    kinds = ("throw", "crash")
    endpoints = (("thrower", "work"), ("thrower", "work_async"))

    async def run(self, history: History) -> None:
        throwers = hosts().spawn_procs(per_host={"w": 2}).spawn("thrower", Thrower)
        for i in range(16):
            op = history.invoke("work", i=i)
            endpoint = throwers.work if i % 2 else throwers.work_async
            try:
                await endpoint.call(i)
            except Exception as exc:
                history.fail(op, repr(exc))
            else:
                history.ok(op)
            await asyncio.sleep(0.1)

    def check(self, history: History) -> list[str]:
        return [
            f"{op['op']} {op['i']} never ended"
            for op in history.operations()
            if op["status"] == "open"
        ]


class Member(Actor):
    """Notes the numbers it is sent."""

    def __init__(self) -> None:
        self.log: list[int] = []

    @endpoint
    def note(self, value: int) -> None:
        self.log.append(value)

    @endpoint
    def notes(self) -> list[int]:
        return self.log


class CastsAlongTrees(Scenario):
    """Numbered casts along trees of fan-out 2, and calls straight to one member, under crashes
    and pauses: each member must see the numbers in order, each once (restarted members start
    a log of their own)."""

    hosts = 3
    duration = 2.0
    settle = 5.0
    kinds = ("crash", "pause", "delay", "clog", "partition")
    cast_fanout = 2

    async def run(self, history: History) -> None:
        members = (
            hosts()
            .spawn_procs(per_host={"m": 3})
            .spawn("members", Member, restart=RestartPolicy(max_restarts=20, backoff=0.01))
        )
        for value in range(40):
            op = history.invoke("note", value=value)
            part = value % 4
            try:
                if part == 0:
                    await members.note.call(value)
                elif part == 1:
                    members.note.broadcast(value)
                elif part == 2:
                    await members.slice(hosts=value % 3, m=value % 3).note.call_one(value)
                else:
                    await members.slice(m=slice(1, 3)).note.call(value)
            except Exception as exc:
                history.fail(op, repr(exc))
            else:
                history.ok(op)
            await asyncio.sleep(0.05)
        for member in range(9):
            member_mesh = members.slice(hosts=member // 3, m=member % 3)
            try:
                log = await asyncio.wait_for(member_mesh.notes.call_one(), 5)
            except Exception as exc:
                history.record("unread", member=member, error=repr(exc))
            else:
                history.record("log", member=member, log=log)

    def check(self, history: History) -> list[str]:
        return [
            f"member {entry['member']} saw {entry['log']}"
            for entry in history.of("log")
            if entry["log"] != sorted(set(entry["log"]))
        ]


class TimingStorm(Scenario):
    """Pings to two actors on each of four procs while clocks jump, CPUs slow down and threads
    stop: they make answers late, never lost."""

    hosts = 2
    duration = 3.0
    settle = 5.0
    kinds = TIMING_KINDS

    async def run(self, history: History) -> None:
        procs = hosts().spawn_procs(per_host={"p": 2})
        first, second = procs.spawn("first", Sleeper), procs.spawn("second", Sleeper)
        for _ in range(30):
            op = history.invoke("ping")
            try:
                calls = asyncio.gather(first.ping.call(), second.ping.call())
                await asyncio.wait_for(calls, 10)
            except Exception as exc:
                history.fail(op, repr(exc))
            else:
                history.ok(op)
            await asyncio.sleep(0.1)

    def check(self, history: History) -> list[str]:
        return [
            f"a ping failed: {op['error']}" for op in history.operations() if op["status"] != "ok"
        ]
