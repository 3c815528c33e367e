"""The simulator's event loop: virtual time, ordering rules, stalls, limits, refusals."""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import logging
import math
import os
import random
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import danaus
import danaus.sim
from danaus.core import config
from danaus.core.blocking import cancel_leftover_tasks
from danaus.transports.sim.loop import (
    SimulationStalled,
    SimulationTimeLimit,
    TimerHandle,
    VirtualTimeLoop,
)
from danaus.transports.sim.timeline import Timeline

Log = list[tuple[str, float]]


@pytest.fixture
def loop() -> Iterator[VirtualTimeLoop]:
    loop = VirtualTimeLoop(Timeline())
    yield loop
    loop.close()


def at(loop: VirtualTimeLoop, when: float, fn: Callable[[], Any]) -> None:
    """A simulation event (not a loop timer) at virtual time ``when`` that calls ``fn``."""
    loop.timeline.call_later(when - loop.timeline.now, lambda _: fn())


def recorder(loop: VirtualTimeLoop, log: Log) -> Callable[[str], Callable[[], None]]:
    """``note("x")`` is a callback that logs ``("x", loop.time())``."""

    def note(label: str) -> Callable[[], None]:
        return lambda: log.append((label, loop.time()))

    return note


def run_until(loop: VirtualTimeLoop, when: float) -> None:
    loop.call_at(when, loop.stop)
    loop.run_forever()


# ---- ordering rules ------------------------------------------------------------------------


def test_timers_run_in_time_order_with_the_clock_at_each(loop):
    log: Log = []
    note = recorder(loop, log)
    loop.call_at(3, note("c"))
    loop.call_later(1, note("a"))
    loop.call_at(2, note("b"))
    run_until(loop, 10)
    assert log == [("a", 1), ("b", 2), ("c", 3)]
    assert loop.time() == 10


def test_ready_callbacks_run_before_simulation_events_of_the_same_instant(loop):
    log: Log = []
    note = recorder(loop, log)

    def chain(n: int) -> None:
        note(f"soon{n}")()
        if n < 3:
            loop.call_soon(chain, n + 1)

    at(loop, 0, note("sim"))
    loop.call_soon(chain, 1)
    run_until(loop, 1)
    assert log == [("soon1", 0), ("soon2", 0), ("soon3", 0), ("sim", 0)]


def test_a_timer_already_due_runs_before_simulation_events_of_the_same_instant(loop):
    log: Log = []
    note = recorder(loop, log)
    at(loop, 0, note("sim"))
    loop.call_later(0, note("timer"))
    run_until(loop, 1)
    assert log == [("timer", 0), ("sim", 0)]


def test_simulation_events_up_to_a_timer_come_before_it(loop):
    log: Log = []
    note = recorder(loop, log)
    loop.call_at(2, note("timer"))
    at(loop, 2, note("sim at 2"))
    at(loop, 1, note("sim at 1"))
    at(loop, 3, note("sim at 3"))
    run_until(loop, 5)
    assert log == [("sim at 1", 1), ("sim at 2", 2), ("timer", 2), ("sim at 3", 3)]


def test_a_simulation_event_that_readies_a_callback_hands_over_to_the_loop(loop):
    """The loop stops advancing the simulation as soon as a callback is ready: the
    timers due by then and that callback run before the next simulation event,
    even one of the same instant."""
    log: Log = []
    note = recorder(loop, log)

    def first() -> None:
        note("e1")()
        loop.call_soon(note("callback of e1"))

    loop.call_at(2, note("timer"))
    at(loop, 2, first)
    at(loop, 2, note("e2"))
    run_until(loop, 5)
    assert [label for label, _ in log] == ["e1", "callback of e1", "timer", "e2"]
    assert {t for _, t in log} == {2}


def test_simulation_events_that_ready_nothing_are_processed_in_one_go(loop):
    log: Log = []
    note = recorder(loop, log)

    def second() -> None:
        note("e2")()
        loop.call_soon(note("callback of e2"))

    loop.call_at(2, note("timer"))
    at(loop, 2, note("e1"))
    at(loop, 2, second)
    run_until(loop, 5)
    assert [label for label, _ in log] == ["e1", "e2", "callback of e2", "timer"]


def test_due_timers_join_the_ready_batch_and_new_callbacks_wait_for_the_next(loop):
    """One iteration runs the callbacks ready when it began, then the timers due; what
    they schedule runs in the next iteration."""
    log: Log = []
    note = recorder(loop, log)

    def first() -> None:
        note("first")()
        loop.call_soon(note("scheduled by first"))

    loop.call_soon(first)
    loop.call_soon(note("second"))
    loop.call_later(0, note("timer"))
    run_until(loop, 1)
    assert [label for label, _ in log] == ["first", "second", "timer", "scheduled by first"]


def test_timers_within_a_clock_tick_of_now_are_due(loop):
    """asyncio's rule: a timer due within the monotonic clock's resolution runs now."""
    log: Log = []
    note = recorder(loop, log)
    loop.call_at(2.0, note("at 2"))
    loop.call_at(2.0 + 5e-10, note("half a tick later"))
    loop.call_at(2.0 + 5e-9, note("five ticks later"))
    run_until(loop, 3)
    assert log == [("at 2", 2.0), ("half a tick later", 2.0), ("five ticks later", 2.0 + 5e-9)]


def test_the_clock_moves_by_the_wait_asyncio_would_compute(loop):
    """The loop waits ``when - now`` from ``now``: in floats that can end a hair before
    ``when`` (7.699999999999999 here). The timer, within a tick, runs then: before a
    simulation event at exactly 7.7."""
    log: Log = []
    note = recorder(loop, log)
    at(loop, 7.7, note("sim"))
    loop.call_at(1.1, lambda: loop.call_at(7.7, note("timer")))
    run_until(loop, 8)
    assert log == [("timer", 1.1 + (7.7 - 1.1)), ("sim", 7.7)]
    assert log[0][1] < 7.7


class _RecordingTimeline(Timeline):
    def __init__(self) -> None:
        super().__init__()
        self.moves: list[float] = []

    def move_to(self, when: float) -> None:
        self.moves.append(when)
        super().move_to(when)


def test_the_clock_advances_at_most_a_day_at_a_time():
    timeline = _RecordingTimeline()
    loop = VirtualTimeLoop(timeline)
    day = 24 * 3600.0
    loop.call_at(3 * day + 0.5, loop.stop)
    loop.run_forever()
    loop.close()
    assert timeline.moves == [day, 2 * day, 3 * day, 3 * day + 0.5]


def _asyncio_order_workload(loop: asyncio.AbstractEventLoop, base: float, seed: int) -> list[str]:
    """Timers all already due (at a few shared instants: many ties), callbacks that
    schedule more, and many cancellations: the order the callbacks run in."""
    rng = random.Random(seed)
    ran: list[str] = []
    timers: list[asyncio.TimerHandle | TimerHandle] = []
    names = itertools.count()

    def act(depth: int) -> None:
        ran.append(f"{depth}.{next(names)}")
        if depth < 3:
            for _ in range(rng.randint(0, 3)):
                if rng.random() < 0.4:
                    loop.call_soon(act, depth + 1)
                else:
                    timers.append(loop.call_at(base + rng.randrange(4), act, depth + 1))
        if timers and rng.random() < 0.5:
            timers.pop(rng.randrange(len(timers))).cancel()

    for _ in range(300):
        timers.append(loop.call_at(base + rng.randrange(4), act, 0))
    for timer in rng.sample(timers, 200):
        timer.cancel()

    async def drain() -> None:
        for _ in range(20):
            await asyncio.sleep(0)

    loop.run_until_complete(drain())
    return ran


@pytest.mark.parametrize("seed", range(3))
def test_timers_due_together_run_in_the_order_asyncio_runs_them(loop, seed):
    """Ties between timers, the dropping of cancelled ones, and the batches of ready
    callbacks follow asyncio's own loop exactly (run here as the reference: every timer
    is already due there, so it never waits)."""
    reference = asyncio.new_event_loop()
    try:
        expected = _asyncio_order_workload(reference, reference.time() - 10, seed)
    finally:
        reference.close()
    assert len(expected) > 300
    assert _asyncio_order_workload(loop, loop.time() - 10, seed) == expected


TICK = 0.25


def random_mix(seed: int) -> Log:
    """A seeded mix of timers, ready callbacks, simulation events and tasks, often at equal
    times, each drawing from one generator in the order they run: any change in the
    ordering rules changes the log."""
    rng = random.Random(seed)
    loop = VirtualTimeLoop(Timeline())
    log: Log = []
    timers: list[TimerHandle] = []
    names = itertools.count()

    def delay() -> float:
        return rng.choice([0, 0, TICK, 2 * TICK, 1e-10, 5e-10, rng.random()])

    def act(label: str, depth: int) -> None:
        log.append((label, loop.time()))
        if depth >= 4:
            return
        for _ in range(rng.randint(0, 2)):
            kind = rng.random()
            name = f"{label}.{next(names)}"
            if kind < 0.3:
                loop.call_soon(act, name, depth + 1)
            elif kind < 0.6:
                timers.append(loop.call_later(delay(), act, name, depth + 1))
            elif kind < 0.85:
                simulated(delay(), name, depth + 1)
            elif timers:
                timers.pop(rng.randrange(len(timers))).cancel()

    def simulated(after: float, label: str, depth: int) -> None:
        if rng.random() < 0.5:
            loop.timeline.call_later(after, lambda _: loop.call_soon(act, label, depth))
        else:
            loop.timeline.call_later(after, lambda _: log.append((label, loop.time())))

    async def sleeper(label: str) -> None:
        for _ in range(3):
            await asyncio.sleep(delay())
            log.append((label, loop.time()))

    async def waiter(label: str) -> None:
        sleep = loop.create_task(asyncio.sleep(rng.choice([TICK, 3 * TICK])))
        timeout = loop.call_later(2 * TICK, sleep.cancel)
        try:
            await sleep
            log.append((f"{label} in time", loop.time()))
        except asyncio.CancelledError:
            log.append((f"{label} timed out", loop.time()))
        timeout.cancel()

    for i in range(40):
        timers.append(loop.call_at(rng.randrange(8) * TICK, act, f"t{i}", 0))
        simulated(rng.randrange(8) * TICK, f"s{i}", 0)
    loop.call_soon(act, "soon", 0)

    async def main() -> None:
        await asyncio.gather(
            *(sleeper(f"sleeper{i}") for i in range(4)), waiter("w0"), waiter("w1")
        )
        log.append(("main", loop.time()))

    if seed % 2:
        loop.time_limit = 1.5
    try:
        loop.run_until_complete(main())
        loop.run_until_complete(loop.create_future())
    except (SimulationStalled, SimulationTimeLimit) as exc:
        log.append((type(exc).__name__, loop.time()))
    loop.time_limit = math.inf
    loop.run_until_complete(cancel_leftover_tasks())
    loop.close()
    return log


def digest(log: Log) -> str:
    return hashlib.sha256(repr(log).encode()).hexdigest()[:16]


MIX_DIGESTS = {
    0: "6599cc91ec8291ac",
    1: "c784663c1ea612be",
    2: "5b43ade1fedf64c7",
    3: "dcd3fbd9e7711972",
    4: "5884b41ed46a4455",
    5: "b6f0b4a849aa2f1a",
}
"""The digests of ``random_mix`` logs as the simulator's loop before this one (built
on asyncio's ``BaseEventLoop``, with a selector that advanced SimPy) wrote them, on
Python 3.10 to 3.13."""


@pytest.mark.parametrize("seed", sorted(MIX_DIGESTS))
def test_a_random_mix_replays_as_on_the_previous_loop(seed):
    log = random_mix(seed)
    assert len(log) > 150
    assert log[-1][0] in ("SimulationStalled", "SimulationTimeLimit")
    assert digest(log) == MIX_DIGESTS[seed]


def test_a_random_mix_replays_exactly():
    assert random_mix(11) == random_mix(11)
    assert random_mix(11) != random_mix(12)


# ---- timers, cancellation and asyncio's helpers --------------------------------------------


def test_a_cancelled_timer_never_runs_nor_moves_the_clock(loop):
    ran: list[str] = []
    timer = loop.call_later(5, ran.append, "timer")
    assert timer.when() == 5
    timer.cancel()
    assert timer.cancelled()
    soon = loop.call_soon(ran.append, "soon")
    soon.cancel()
    with pytest.raises(SimulationStalled):
        loop.run_until_complete(loop.create_future())
    assert ran == []
    assert loop.time() == 0


def test_many_cancelled_timers_are_dropped_and_the_rest_still_run(loop):
    ran: list[int] = []
    timers = [loop.call_at(i, ran.append, i) for i in range(300)]
    for timer in timers[:250]:
        timer.cancel()
    run_until(loop, 1000)
    assert ran == list(range(250, 300))


def test_sleep_takes_virtual_time_only(loop):
    async def main() -> list[float]:
        times = []
        for delay in (5, 0, 0.25):
            await asyncio.sleep(delay)
            times.append(loop.time())
        return times

    assert loop.run_until_complete(main()) == [5, 5, 5.25]


def test_wait_for_times_out_in_virtual_time(loop):
    async def main() -> tuple[float, int]:
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.sleep(10), 3)
        timed_out = loop.time()
        value = await asyncio.wait_for(asyncio.sleep(1, result=7), 3)
        return timed_out, value

    assert loop.run_until_complete(main()) == (3, 7)
    assert loop.time() == 4


@pytest.mark.skipif(not hasattr(asyncio, "timeout"), reason="asyncio.timeout is Python 3.11+")
def test_timeout_context_expires_in_virtual_time(loop):
    async def main() -> float:
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(2):
                await asyncio.sleep(10)
        return loop.time()

    assert loop.run_until_complete(main()) == 2


def test_gather_finishes_with_the_slowest(loop):
    finished: Log = []

    async def after(delay: float, label: str) -> str:
        await asyncio.sleep(delay)
        finished.append((label, loop.time()))
        return label

    async def main() -> list[str]:
        return await asyncio.gather(after(1, "a"), after(3, "b"), after(2, "c"))

    assert loop.run_until_complete(main()) == ["a", "b", "c"]
    assert finished == [("a", 1), ("c", 2), ("b", 3)]


def test_cancelling_a_task_ends_its_sleep_and_its_timer(loop):
    async def main() -> float:
        task = loop.create_task(asyncio.sleep(10), name="sleeper")
        assert task.get_name() == "sleeper"
        await asyncio.sleep(1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return loop.time()

    assert loop.run_until_complete(main()) == 1
    with pytest.raises(SimulationStalled):  # the sleep's timer is gone: nothing is left
        loop.run_forever()
    assert loop.time() == 1


def test_tasks_go_through_the_task_factory(loop):
    made: list[dict[str, Any]] = []

    def factory(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
        made.append(kwargs)
        return asyncio.Task(coro, loop=loop, **kwargs)

    loop.set_task_factory(factory)
    assert loop.get_task_factory() is factory

    async def answer() -> int:
        return 42

    task = loop.create_task(answer(), name="answer")
    assert loop.run_until_complete(task) == 42
    assert task.get_name() == "answer"
    assert made == [{}]
    with pytest.raises(TypeError, match="task factory"):
        loop.set_task_factory(42)  # type: ignore[arg-type]


# ---- stalls and the time limit -------------------------------------------------------------


def test_waiting_for_what_can_never_happen_stalls(loop):
    at(loop, 4, lambda: None)
    with pytest.raises(SimulationStalled, match="nothing left to do"):
        loop.run_until_complete(loop.create_future())
    assert loop.time() == 4  # the simulation's last event was processed first
    assert not loop.is_running()


def test_a_stall_is_explained_by_describe_stall(loop):
    loop.describe_stall = lambda: "root waits for call 7 to w[3], which was lost"
    with pytest.raises(SimulationStalled) as stalled:
        loop.run_until_complete(loop.create_future())
    assert str(stalled.value).startswith("the simulation has nothing left to do")
    assert str(stalled.value).endswith("\nroot waits for call 7 to w[3], which was lost")


def test_a_failing_describe_stall_does_not_hide_the_stall(loop):
    def broken() -> str:
        raise KeyError("w[3]")

    loop.describe_stall = broken
    with pytest.raises(
        SimulationStalled, match=r"describing the stall failed: KeyError\('w\[3\]'\)"
    ):
        loop.run_until_complete(loop.create_future())


def test_running_past_the_time_limit_raises_and_the_loop_can_resume(loop):
    log: Log = []
    note = recorder(loop, log)
    at(loop, 5, note("sim at 5"))
    at(loop, 15, note("sim at 15"))
    loop.time_limit = 10
    task = loop.create_task(asyncio.sleep(20, result="woke"))
    with pytest.raises(SimulationTimeLimit, match="time limit of 10 s"):
        loop.run_until_complete(task)
    assert log == [("sim at 5", 5)]
    assert loop.time() == 5  # the clock stops at the last event before the limit
    loop.time_limit = math.inf
    assert loop.run_until_complete(task) == "woke"
    assert log == [("sim at 5", 5), ("sim at 15", 15)]
    assert loop.time() == 20


def test_under_a_time_limit_waiting_forever_hits_the_limit(loop):
    loop.time_limit = 10
    with pytest.raises(SimulationTimeLimit):
        loop.run_until_complete(loop.create_future())


# ---- what the simulator refuses --------------------------------------------------------------


def test_run_in_executor_is_refused_because_threads_do_not_run(loop):
    with pytest.raises(NotImplementedError, match="threads do not run in virtual time"):
        loop.run_in_executor(None, print, "hello")
    with pytest.raises(NotImplementedError, match="threads"):
        loop.set_default_executor(None)

    async def main() -> None:
        await asyncio.to_thread(print, "hello")

    with pytest.raises(NotImplementedError, match="run_in_executor"):
        loop.run_until_complete(main())


@pytest.mark.parametrize(
    ("method", "args"),
    [
        ("add_reader", (0, print)),
        ("add_writer", (1, print)),
        ("remove_reader", (0,)),
        ("sock_recv", (None, 10)),
        ("create_connection", (asyncio.Protocol, "localhost", 80)),
        ("create_server", (asyncio.Protocol, "localhost", 80)),
        ("getaddrinfo", ("localhost", 80)),
        ("subprocess_exec", (asyncio.SubprocessProtocol, "ls")),
        ("add_signal_handler", (2, print)),
    ],
)
def test_io_subprocesses_and_signals_are_refused(loop, method, args):
    with pytest.raises(
        NotImplementedError, match=rf"^{method}\(\) is not available on the simulator"
    ):
        getattr(loop, method)(*args)


# ---- the loop's life and errors --------------------------------------------------------------


def test_an_error_in_a_callback_goes_to_the_handler_and_the_loop_goes_on(loop):
    seen: list[dict[str, Any]] = []
    ran: list[str] = []

    def broken() -> None:
        raise ValueError("bad")

    loop.set_exception_handler(lambda _loop, context: seen.append(context))
    loop.call_soon(broken)
    loop.call_soon(ran.append, "after")
    run_until(loop, 1)
    assert ran == ["after"]
    assert [type(c["exception"]) for c in seen] == [ValueError]
    assert seen[0]["message"].startswith("Exception in callback")
    assert "broken" in seen[0]["message"]
    with pytest.raises(TypeError, match="callable"):
        loop.set_exception_handler(42)  # type: ignore[arg-type]


def test_unhandled_errors_are_logged_on_the_asyncio_logger(loop, caplog):
    caplog.set_level(logging.ERROR, logger="asyncio")

    def broken() -> None:
        raise ValueError("bad")

    loop.call_soon(broken)
    run_until(loop, 1)
    [record] = caplog.records
    assert record.name == "asyncio"
    assert "Exception in callback" in record.getMessage()
    assert record.exc_info is not None and record.exc_info[0] is ValueError


def test_system_exit_in_a_callback_leaves_the_loop_usable(loop):
    def leave() -> None:
        raise SystemExit(3)

    loop.call_soon(leave)
    with pytest.raises(SystemExit):
        loop.run_forever()
    assert not loop.is_running()
    assert loop.run_until_complete(asyncio.sleep(1, result="again")) == "again"


def test_the_loop_refuses_to_run_twice_or_close_while_running(loop):
    errors: list[str] = []

    def inside() -> None:
        assert asyncio.get_running_loop() is loop
        assert loop.is_running()
        for attempt in (lambda: loop.run_until_complete(loop.create_future()), loop.close):
            try:
                attempt()
            except RuntimeError as exc:
                errors.append(str(exc))

    loop.call_soon(inside)
    run_until(loop, 1)
    assert errors == ["This event loop is already running", "Cannot close a running event loop"]
    assert not loop.is_running()
    with pytest.raises(RuntimeError):
        asyncio.get_running_loop()


def test_closing_runs_before_close_once_and_refuses_further_work():
    loop = VirtualTimeLoop(Timeline())
    closed: list[float] = []

    def before_close() -> None:
        loop.run_until_complete(asyncio.sleep(2))  # the world may still run the loop
        closed.append(loop.time())

    loop.before_close = before_close
    loop.close()
    loop.close()
    assert closed == [2]
    assert loop.is_closed()
    with pytest.raises(RuntimeError, match="closed"):
        loop.call_soon(print)
    with pytest.raises(RuntimeError, match="closed"):
        loop.call_later(1, print)


def test_after_main_runs_once_after_the_next_run_until_complete(loop):
    calls: list[float] = []
    loop.after_main = lambda: calls.append(loop.time())
    loop.run_until_complete(asyncio.sleep(1))
    loop.run_until_complete(asyncio.sleep(1))
    assert calls == [1]


def test_async_generators_are_finalized_on_the_loop(loop):
    closed: list[tuple[str, float]] = []
    kept: list[Any] = []

    async def numbers(label: str) -> Any:
        try:
            yield 1
            yield 2
        finally:
            closed.append((label, loop.time()))

    async def main() -> None:
        assert sys.get_asyncgen_hooks().finalizer is not None
        dropped, held = numbers("dropped"), numbers("held")
        await dropped.__anext__()
        await held.__anext__()
        kept.append(held)
        del dropped  # finalized: the loop closes it in a task of its own
        await asyncio.sleep(1)

    hooks = sys.get_asyncgen_hooks()
    loop.run_until_complete(main())
    assert sys.get_asyncgen_hooks() == hooks
    assert closed == [("dropped", 0)]
    loop.run_until_complete(loop.shutdown_asyncgens())
    assert closed == [("dropped", 0), ("held", 1)]
    loop.run_until_complete(loop.shutdown_default_executor())


def test_debug_mode_is_a_setting(loop):
    loop.set_debug(True)
    assert loop.get_debug()
    with pytest.raises(TypeError, match="coroutines cannot be used"):
        loop.call_soon(asyncio.sleep)
    loop.set_debug(False)
    assert not loop.get_debug()


def test_handles_describe_themselves(loop):
    timer = loop.call_at(3, print, "x")
    assert "print('x',)" in repr(timer) and "when=3" in repr(timer)
    timer.cancel()
    assert "cancelled" in repr(timer)
    assert "now=0" in repr(loop)


# ---- asyncio.run and asyncio.Runner on the simulator -------------------------------------------


async def where_am_i() -> tuple[str, float]:
    await asyncio.sleep(5)
    loop = asyncio.get_running_loop()
    return type(loop).__name__, loop.time()


@pytest.fixture
def sim_selected(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    policy = asyncio.get_event_loop_policy()
    monkeypatch.delenv("DANAUS_TRANSPORT", raising=False)
    danaus.configure(transport="sim")
    try:
        yield
    finally:
        danaus.shutdown()
        asyncio.set_event_loop_policy(policy)


def test_asyncio_run_runs_main_on_the_simulator(sim_selected):
    assert asyncio.run(where_am_i()) == ("VirtualTimeLoop", 5)


def test_the_policy_wraps_the_one_before_it(sim_selected):
    policy = asyncio.get_event_loop_policy()
    assert type(policy).__name__ == "_SimLoopPolicy"
    assert isinstance(policy.previous, asyncio.AbstractEventLoopPolicy)  # type: ignore[attr-defined]
    own = asyncio.new_event_loop()
    try:
        policy.set_event_loop(own)
        assert policy.previous.get_event_loop() is own  # type: ignore[attr-defined]
        assert policy.get_event_loop() is own
    finally:
        policy.set_event_loop(None)
        own.close()
    danaus.configure(transport="sim")  # again: the policy is not wrapped twice
    assert asyncio.get_event_loop_policy() is policy


@pytest.mark.skipif(not hasattr(asyncio, "Runner"), reason="asyncio.Runner is Python 3.11+")
def test_a_runner_with_the_loop_factory_runs_on_the_simulator(sim_selected):
    with asyncio.Runner(loop_factory=danaus.sim.loop_factory) as runner:
        assert runner.run(where_am_i()) == ("VirtualTimeLoop", 5)


@pytest.mark.skipif(sys.version_info < (3, 12), reason="asyncio.run(loop_factory=) is Python 3.12+")
def test_asyncio_run_with_the_loop_factory_runs_on_the_simulator(sim_selected):
    assert asyncio.run(where_am_i(), loop_factory=danaus.sim.loop_factory) == ("VirtualTimeLoop", 5)


def test_the_loop_factory_needs_the_simulator_selected(monkeypatch):
    assert config.installed() is None
    monkeypatch.setattr(config, "selected", lambda: "tcp")
    with pytest.raises(RuntimeError, match='configure\\(transport="sim"'):
        danaus.sim.loop_factory()


FIRST_USE_IN_ASYNCIO_RUN = """
import asyncio
import danaus

async def main():
    danaus.this_host()
    return type(asyncio.get_running_loop()).__name__

print(asyncio.run(main()))
"""


def test_a_first_use_inside_asyncio_run_runs_on_the_simulator_under_the_environment():
    """Under ``DANAUS_TRANSPORT=sim``, importing danaus routes ``asyncio.run``: a program (or
    a test runner's loop) whose first use of Danaus comes inside it runs on the simulator."""
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run(
        [sys.executable, "-c", FIRST_USE_IN_ASYNCIO_RUN],
        cwd=root,
        env={**os.environ, "DANAUS_TRANSPORT": "sim"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "VirtualTimeLoop"


def test_the_loop_benchmark_prints_what_it_promises():
    """``benchmarks/sim_loop.py`` runs end to end (its figures are never checked)."""
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run(
        [sys.executable, str(root / "benchmarks" / "sim_loop.py"), "--quick"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert [row["benchmark"] for row in rows] == [
        "sim_loop_callbacks",
        "sim_loop_task_steps",
        "sim_loop_timers",
        "sim_loop_sim_events",
    ]
    assert all(row["operations_per_cpu_s"] > 0 for row in rows)
