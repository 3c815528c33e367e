"""Calls between two procs are handed on in the order they were numbered, once each."""

from __future__ import annotations

import threading

from hypothesis import given
from hypothesis import strategies as st

from danaus.core.ordering import Inbound, Outbound


def test_outbound_numbers_each_receiver_apart_and_starts_again_after_a_loss():
    out = Outbound()
    assert out.numbers(["a", "b", "a", "a"]) == [0, 0, 1, 2]
    out.forget("a")
    assert out.numbers(["a"]) + out.numbers(["b"]) == [0, 1]


def test_outbound_never_gives_two_threads_one_number():
    out = Outbound()
    taken: list[int] = []

    def take() -> None:
        for _ in range(1000):
            taken.extend(out.numbers(["p", "p"]))

    threads = [threading.Thread(target=take) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(taken) == list(range(8000))


def test_early_calls_wait_for_those_before_them():
    inbound: Inbound[str] = Inbound()
    assert inbound.take("p", 1, "b") == []
    assert inbound.holding("p")
    assert inbound.take("p", 2, "c") == []
    assert inbound.take("p", 0, "a") == ["a", "b", "c"]
    assert not inbound.holding("p")
    assert inbound.take("p", 3, "d") == ["d"]


def test_duplicates_are_dropped_whether_handed_on_or_held():
    inbound: Inbound[str] = Inbound()
    assert inbound.take("p", 0, "a") == ["a"]
    assert inbound.take("p", 0, "a") is None
    assert inbound.take("p", 2, "c") == []
    assert inbound.take("p", 2, "c") is None
    assert inbound.take("p", 1, "b") == ["b", "c"]


def test_senders_are_ordered_apart():
    inbound: Inbound[str] = Inbound()
    assert inbound.take("p", 1, "p1") == []
    assert inbound.take("q", 0, "q0") == ["q0"]
    assert inbound.take("p", 0, "p0") == ["p0", "p1"]


def test_a_refused_call_keeps_its_place_without_being_handed_on():
    inbound: Inbound[str] = Inbound()
    assert inbound.take("p", 1, "b") == []
    assert inbound.take("p", 0, None) == ["b"]


def test_a_lost_sender_takes_what_was_held_with_it():
    inbound: Inbound[str] = Inbound()
    inbound.take("p", 0, "a")
    inbound.take("p", 2, "c")
    inbound.take("p", 3, "d")
    assert inbound.forget("p") == 2
    assert not inbound.holding("p")
    assert inbound.forget("p") == 0


@given(st.permutations(range(30)), st.lists(st.integers(0, 29), max_size=30))
def test_any_arrival_order_with_repeats_hands_each_call_on_once_in_order(order, repeats):
    inbound: Inbound[int] = Inbound()
    handed: list[int] = []
    for seq in [*order[:15], *repeats, *order[15:], *repeats]:
        due = inbound.take("p", seq, seq)
        handed.extend(due or [])
    assert handed == list(range(30))
