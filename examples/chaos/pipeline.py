"""A three-stage pipeline of actor meshes with end-to-end retries, under faults.

The controller feeds numbered items to stage 1 (two actors on h1), which
transforms each and passes it on to stage 2 (two actors on h2), which passes
it to stage 3, the sink: one actor in the controller's own process, which no
fault touches, as a job would keep its results in durable storage. Each item
carries the meshes it has still to go through and the port on which the sink
acknowledges it. Hops are one-way messages: an item is lost when a stage fails
(killed, cut off, or failed by an injected exception) and late when a link is
slow or held. Stages 1 and 2 keep no state and are restarted when they fail.

Delivery is at least once: the controller sends an item again, through the
other stage-1 actor, when it has not been acknowledged within a deadline, so
copies of an item may reach the sink. The sink applies each item's effect (an
entry in its ledger) once, keyed by item, and acknowledges every copy with
what it applied.

Invariants, from the history and the sink's ledger:

* every acknowledged item is in the ledger once, having gone through stages
  1, 2 and 3 in that order, with the value of the three transforms composed;
* no item is acknowledged as complete twice; the ledger holds only items fed;
* every item fed ends complete or given up, and none is given up: the
  controller retries until the faults have healed and the stages restarted.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from danaus import (
    Actor,
    ActorMesh,
    Channel,
    Port,
    RestartPolicy,
    SupervisionError,
    endpoint,
    hosts,
    send,
    this_proc,
)
from danaus.chaos import History, Scenario

PATH = ["stage1", "stage2", "stage3"]


def transform(stage: int, value: int) -> int:
    if stage == 1:
        return 2 * value + 1
    if stage == 2:
        return value * value
    return value - 3


def composed(item: int) -> int:
    return transform(3, transform(2, transform(1, item)))


class Stage(Actor):
    def __init__(self, stage: int) -> None:
        self.stage = stage
        self.ledger: dict[int, tuple[int, list[str]]] = {}
        self.applied: list[int] = []

    @endpoint
    def process(
        self,
        item: int,
        value: int,
        path: list[str],
        route: list[ActorMesh[Stage]],
        done: Port[tuple[int, int, list[str]]],
    ) -> None:
        """Transform the item; pass it to the next stage, or (at the sink) apply it once."""
        value, path = transform(self.stage, value), [*path, f"stage{self.stage}"]
        if route:
            args = (item, value, path, route[1:], done)
            send(route[0].process, args, {}, selection="choose")
            return
        if item not in self.ledger:
            self.ledger[item] = (value, path)
            self.applied.append(item)
        done.send((item, *self.ledger[item]))

    @endpoint
    def contents(self) -> dict[str, Any]:
        return {"ledger": self.ledger, "applied": self.applied}


class Pipeline(Scenario):
    """Items flow through three stages; each completes exactly once at the sink."""

    hosts = 3
    duration = 6.0
    settle = 3.0
    endpoints = (("stage1", "process"), ("stage2", "process"))
    items = 30
    feed_every = 0.15
    retry_after = 1.0

    async def run(self, history: History) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        policy = RestartPolicy(max_restarts=100, backoff=0.05, max_backoff=0.5)

        def stage(n: int) -> ActorMesh[Stage]:
            procs = hosts().slice(hosts=n).spawn_procs(per_host={"procs": 2}, name=f"stage{n}")
            return procs.spawn(f"stage{n}", Stage, n, restart=policy)

        stage1, stage2, sink = stage(1), stage(2), this_proc().spawn("stage3", Stage, 3)
        done, acks = Channel.open()
        acked: dict[int, tuple[int, list[str]]] = {}

        async def collect() -> None:
            while True:
                item, value, path = await acks.recv()
                acked.setdefault(item, (value, path))

        collector = loop.create_task(collect())
        ops: dict[int, int] = {}
        attempts: Counter[int] = Counter()
        due: dict[int, float] = {}
        fed = 0
        # Retry until well after the last fault has healed.
        while (fed < self.items or ops) and loop.time() < self.quiet_after + 3:
            now = loop.time()
            if fed < self.items and now >= fed * self.feed_every:
                ops[fed], due[fed] = history.invoke("item", item=fed), now
                fed += 1
            for item in [i for i in ops if i in acked]:
                value, path = acked[item]
                history.ok(ops.pop(item), value=value, path=path, attempts=attempts[item])
            for item in [i for i in ops if due[i] <= now]:
                due[item] = now + self.retry_after
                attempts[item] += 1
                member = stage1.slice(procs=attempts[item] % 2)
                try:
                    member.process.broadcast(item, item, [], [stage2, sink], done)
                except SupervisionError as exc:
                    history.record("refused", item=item, error=str(exc))
            await asyncio.sleep(0.05)
        for item, op in ops.items():
            history.fail(op, "gave up", attempts=attempts[item])
        collector.cancel()
        contents = await sink.contents.call_one()
        history.record("final", **contents)
        return contents

    def check(self, history: History) -> list[str]:
        final = next(history.of("final"), None)
        if final is None:
            return ["the sink was never read back"]
        ledger, problems = final["ledger"], []
        for item, count in sorted(Counter(final["applied"]).items()):
            if count > 1:
                problems.append(f"item {item} applied {count} times at the sink")
        ops = history.operations()
        fed = {op["item"] for op in ops}
        problems += [f"the sink applied item {i}, never fed" for i in sorted(set(ledger) - fed)]
        oks = Counter(e["id"] for e in history.of("ok"))
        for op in ops:
            item = op["item"]
            if op["status"] != "ok":
                problems.append(
                    f"item {item} ended {op['status']} after {op.get('attempts')} tries"
                )
                continue
            if oks[op["id"]] > 1:
                problems.append(f"item {item} completed {oks[op['id']]} times")
            if op["path"] != PATH or op["value"] != composed(item):
                problems.append(f"item {item} completed via {op['path']} as {op['value']}")
            if ledger.get(item) != (op["value"], op["path"]):
                problems.append(
                    f"item {item} acknowledged as {op['value']}, sink has {ledger.get(item)}"
                )
        return problems
