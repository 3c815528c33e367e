"""Adverbs, ordering, and the one-message-at-a-time rule."""

from __future__ import annotations

import asyncio
import operator

import pytest

from danaus import (
    Accumulator,
    Actor,
    ValueMesh,
    current_rank,
    current_size,
    endpoint,
    this_host,
)


class Counter(Actor):
    def __init__(self, start: int = 0) -> None:
        self.value = start
        self.log: list[int] = []

    @endpoint
    def incr(self, by: int = 1) -> int:
        self.value += by
        return self.value

    @endpoint
    def record(self, item: int) -> None:
        self.log.append(item)

    @endpoint
    def history(self) -> list[int]:
        return self.log

    @endpoint
    def get(self) -> int:
        return self.value

    @endpoint
    def whoami(self) -> tuple[int, dict[str, int]]:
        return current_rank().rank, current_size()


class Slow(Actor):
    """Records how many of its endpoints run at once."""

    def __init__(self) -> None:
        self.running = 0
        self.peak = 0

    @endpoint
    async def work(self, seconds: float) -> int:
        self.running += 1
        self.peak = max(self.peak, self.running)
        await asyncio.sleep(seconds)
        self.running -= 1
        return self.peak

    @endpoint
    def peak_seen(self) -> int:
        return self.peak


def test_call_returns_value_mesh_over_the_mesh(run):
    def main():
        procs = this_host().spawn_procs(per_host={"gpus": 4})
        counters = procs.spawn("counters", Counter, 10)
        values = counters.incr.call(by=2).get()
        assert isinstance(values, ValueMesh)
        assert values.extent == counters.extent
        return list(values.values())

    assert run(main) == [12, 12, 12, 12]


def test_call_one_needs_exactly_one_actor(run):
    def main():
        counters = this_host().spawn_procs({"gpus": 3}).spawn("c", Counter)
        with pytest.raises(ValueError, match="exactly one"):
            counters.incr.call_one()
        return counters.slice(gpus=1).incr.call_one(5).get()

    assert run(main) == 5


def test_choose_spreads_over_ranks(run):
    def main():
        counters = this_host().spawn_procs({"gpus": 4}).spawn("c", Counter)
        for _ in range(20):
            counters.incr.choose().get()
        return list(counters.get.call().get().values())

    values = run(main)
    assert sum(values) == 20
    assert all(v > 0 for v in values)


def test_stream_yields_one_future_per_rank(run):
    def main():
        counters = this_host().spawn_procs({"gpus": 5}).spawn("c", Counter)
        futures = list(counters.whoami.stream())
        return sorted(f.get()[0] for f in futures)

    assert run(main) == [0, 1, 2, 3, 4]


def test_broadcast_is_delivered_in_order_per_sender(run):
    def main():
        counters = this_host().spawn_procs({"gpus": 3}).spawn("c", Counter)
        for i in range(200):
            counters.record.broadcast(i)
        return list(counters.history.call().get().values())

    for history in run(main):
        assert history == list(range(200))


def test_fifo_between_calls_and_broadcasts(run):
    def main():
        counter = this_host().spawn_procs().spawn("c", Counter)
        futures = []
        for i in range(50):
            counter.record.broadcast(i)
            futures.append(counter.incr.call_one())
        return [f.get() for f in futures], counter.history.call_one().get()

    increments, history = run(main)
    assert increments == list(range(1, 51))
    assert history == list(range(50))


def test_actor_handles_one_message_at_a_time(run):
    def main():
        slow = this_host().spawn_procs().spawn("s", Slow)
        futures = [slow.work.call_one(0.01) for _ in range(10)]
        for f in futures:
            f.get()
        return slow.peak_seen.call_one().get()

    assert run(main) == 1


def test_current_rank_and_size_are_those_of_the_messaged_slice(run):
    def main():
        counters = this_host().spawn_procs({"x": 2, "y": 3}).spawn("c", Counter)
        whole = counters.whoami.call().get()
        part = counters.slice(y=slice(1, 3)).whoami.call().get()
        return whole, part

    whole, part = run(main)
    assert [r for r, _ in whole.values()] == list(range(6))
    assert all(s == {"x": 2, "y": 3} for _, s in whole.values())
    assert [r for r, _ in part.values()] == list(range(4))
    assert all(s == {"x": 2, "y": 2} for _, s in part.values())
    assert part.item(x=1, y=0) == (2, {"x": 2, "y": 2})


def test_accumulator_folds_every_answer(run):
    def main():
        counters = this_host().spawn_procs({"gpus": 4}).spawn("c", Counter, 1)
        return Accumulator(counters.incr, 100, operator.add).accumulate(by=1).get()

    assert run(main) == 108


def test_async_controller_awaits_futures(run):
    async def main():
        counters = this_host().spawn_procs({"gpus": 2}).spawn("c", Counter)
        first = await counters.incr.call(3)
        second = await counters.slice(gpus=0).incr.call_one()
        return list(first.values()), second

    assert run(main) == ([3, 3], 4)


def test_future_get_timeout_leaves_the_future_usable(run):
    def main():
        slow = this_host().spawn_procs().spawn("s", Slow)
        future = slow.work.call_one(2.0)
        with pytest.raises(TimeoutError):
            future.get(timeout=0.5)
        assert not future.done()
        return future.get(timeout=30)

    assert run(main) == 1
