"""The simulation's timeline: events in order of time, then of scheduling, whatever their lane."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from danaus.transports.sim.timeline import Lane, Timeline


def run_all(timeline: Timeline) -> None:
    timeline.advance(math.inf, [], {}, lambda: False)


@pytest.mark.parametrize("seed", range(20))
def test_events_run_in_order_of_time_then_of_scheduling_whatever_their_lane(seed):
    """Events scheduled through lanes (in and out of their lane's order) and directly, some
    from inside handlers, many due together, each run once at its time, in the order of a
    heap keyed by (time, number in scheduling order)."""
    rng = random.Random(seed)
    timeline = Timeline()
    lanes = [Lane() for _ in range(3)]
    scheduled: dict[int, float] = {}
    ran: list[tuple[float, int]] = []
    numbers = itertools.count()

    def handler(number: int) -> None:
        ran.append((timeline.now, number))
        for _ in range(rng.choice([0, 0, 1, 2])):
            schedule()

    def schedule() -> None:
        number = next(numbers)
        delay = rng.choice([0.0, 1e-6, 2e-6, rng.random() * 1e-5])
        now = timeline.now
        scheduled[number] = now + ((now + delay) - now)
        if rng.random() < 0.7:
            timeline.through(rng.choice(lanes), now + delay, handler, number)
        else:
            timeline.call_later(delay, handler, number)

    for _ in range(40):
        schedule()
    run_all(timeline)
    assert len(ran) > 40
    assert ran == sorted((when, number) for number, when in scheduled.items())


def test_a_lane_keeps_later_events_off_the_heap_until_their_turn():
    timeline = Timeline()
    lane = Lane()
    ran: list[str] = []
    timeline.through(lane, 1.0, ran.append, "a")
    timeline.through(lane, 2.0, ran.append, "b")
    timeline.through(lane, 2.0, ran.append, "c")
    timeline.through(lane, 0.5, ran.append, "early")  # before the lane's last: on the heap
    timeline.call_later(1.5, ran.append, "timer")
    assert len(lane.waiting) == 2
    run_all(timeline)
    assert ran == ["early", "a", "timer", "b", "c"]
    assert timeline.now == 2.0
    assert not lane.queued and not lane.waiting


def test_advance_stops_once_something_is_ready_or_a_watch_holds():
    timeline = Timeline()
    ready: list[str] = []
    for i, when in enumerate([1.0, 2.0, 3.0]):
        timeline.call_later(when, ready.append, f"e{i}")
    assert timeline.advance(10.0, ready, {}, lambda: False)
    assert ready == ["e0"] and timeline.now == 1.0
    ready.clear()
    assert not timeline.advance(1.5, ready, {}, lambda: False)  # nothing due by then
    assert timeline.now == 1.0 and timeline.next_time() == 2.0
    seen: list[str] = []
    timeline.call_later(0.0, seen.append, "x")
    watches = {"any": None}
    assert timeline.advance(10.0, ready, watches, lambda: bool(seen))
    assert seen == ["x"] and timeline.now == 1.0


def test_the_clock_moves_only_past_events_and_never_to_an_infinite_one():
    timeline = Timeline()
    timeline.call_later(math.inf, print, "never")
    assert timeline.next_time() == math.inf
    timeline.move_to(5.0)
    assert timeline.now == 5.0
    timeline.call_later(1.0, print, "at six")
    with pytest.raises(RuntimeError, match="cannot skip"):
        timeline.move_to(7.0)


def test_the_clock_starts_at_an_integer_zero_as_traces_always_read_it():
    assert repr(Timeline().now) == "0"
