"""Aggregation of procs' output lines, on a clock and timers the test drives."""

from __future__ import annotations

import logging

import pytest

from danaus.core.logs import LoggingOptions, OutputAggregator
from tests.timers import Timers


def aggregator() -> tuple[OutputAggregator, list[str], Timers]:
    out: list[str] = []
    timers = Timers()
    return OutputAggregator(out.append, lambda: timers.now, timers.call_later), out, timers


AGGREGATE = LoggingOptions(stream_to_client=True, aggregate_window_sec=3)


def test_lines_pass_at_once_without_a_window():
    agg, out, _ = aggregator()
    agg.write("m.0", "[trainers gpus=0] hello\n")
    assert out == ["[trainers gpus=0] hello\n"]


def test_identical_lines_of_64_procs_become_one_line_after_the_window():
    agg, out, timers = aggregator()
    procs = [f"m.{i}" for i in range(64)]
    agg.set_options(procs, AGGREGATE)
    for i, proc in enumerate(procs):
        agg.write(proc, f"[trainers gpus={i}] step 1 done\n[trainers gpus={i}] rank {i}\n")
    assert out == []
    timers.advance(2.9)
    assert out == []
    timers.advance(0.1)
    lines = "".join(out).splitlines()
    assert lines[0] == "[64 similar log lines] [trainers] step 1 done"
    assert lines[1:] == [f"[trainers gpus={i}] rank {i}" for i in range(64)]


def test_a_new_window_opens_after_one_closes():
    agg, out, timers = aggregator()
    agg.set_options(["a.0", "b.0"], AGGREGATE)
    agg.write("a.0", "[a] x\n")
    timers.advance(3)
    agg.write("a.0", "[a] x\n")
    agg.write("b.0", "[b] x\n")
    timers.advance(3)
    assert out == ["[a] x\n", "[2 similar log lines] [a, b] x\n"]


def test_options_apply_per_proc_and_can_be_undone():
    agg, out, timers = aggregator()
    agg.set_options(["m.0"], AGGREGATE)
    agg.write("m.0", "[m] held\n")
    agg.write("other.0", "[o] direct\n")
    assert out == ["[o] direct\n"]
    agg.set_options(["m.0"], LoggingOptions())
    agg.write("m.0", "[m] direct too\n")
    assert out == ["[o] direct\n", "[m] direct too\n"]
    timers.advance(3)
    assert out[-1] == "[m] held\n"


def test_a_proc_that_ends_flushes_what_is_held():
    agg, out, _ = aggregator()
    agg.set_options(["m.0", "m.1"], AGGREGATE)
    agg.write("m.0", "[m r=0] bye\n")
    agg.write("m.1", "[m r=1] bye\n")
    agg.forget("m.0")
    assert out == ["[2 similar log lines] [m] bye\n"]


def test_unprefixed_lines_are_grouped_too():
    agg, out, _ = aggregator()
    agg.set_options(["m.0"], AGGREGATE)
    agg.write("m.0", "plain\nplain\n")
    agg.flush()
    assert out == ["[2 similar log lines] plain\n"]


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ((False, 3, logging.INFO), "needs stream_to_client"),
        ((True, 0, logging.INFO), "positive"),
        ((True, float("inf"), logging.INFO), "positive"),
        ((True, None, 300), "invalid logging level"),
        ((True, None, -1), "invalid logging level"),
    ],
)
def test_options_are_checked(args, error):
    with pytest.raises(ValueError, match=error):
        LoggingOptions.checked(*args)


def test_option_types_are_checked():
    with pytest.raises(TypeError):
        LoggingOptions.checked(True, "3", logging.INFO)
    with pytest.raises(TypeError):
        LoggingOptions.checked(True, None, "INFO")
