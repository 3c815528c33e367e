"""An actor's life is the state machine of `danaus.core.lifecycle`: its table says every change
there is, and nothing changes the state but `Lifecycle.transition`.

The simulator runs the scenarios that move real actors along the table's arrows; the arrows
that only an ending proc takes are driven directly, as are the refusals.
"""

from __future__ import annotations

import ast
import itertools
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import danaus
import danaus.sim
from danaus import Actor, context, endpoint, this_host
from danaus.core import lifecycle
from danaus.core.instance import Instance, InstanceKind
from danaus.core.lifecycle import (
    FAILED,
    RUNNING,
    STARTING,
    STOPPED,
    STOPPING,
    TRANSITIONS,
    ActorState,
    Lifecycle,
)

Arrow = tuple[ActorState, ActorState]


class Member(Actor):
    def __init__(self, init_seconds: float = 0.0, init_raises: bool = False) -> None:
        if init_raises:
            raise ValueError("no")
        time.sleep(init_seconds)  # virtual seconds on the simulator

    @endpoint
    def ping(self) -> int:
        return 1

    @endpoint
    def boom(self) -> None:
        raise ValueError("boom")

    @endpoint
    def stop_then_boom(self) -> None:
        context().actor_instance.stop()
        raise ValueError("boom while stopping")

    @endpoint
    def exit_proc(self) -> None:
        sys.exit(3)


@pytest.fixture
def arrows(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Arrow]]:
    """The changes of state user actors make, in order, while the test runs."""
    taken: list[Arrow] = []
    transition = Lifecycle.transition

    def recording(life: Lifecycle, to: ActorState) -> bool:
        before = life.state
        changed = transition(life, to)
        if changed and life.instance.kind is InstanceKind.USER:
            taken.append((before, to))
        return changed

    monkeypatch.setattr(Lifecycle, "transition", recording)
    monkeypatch.setattr(danaus, "unhandled_fault_hook", lambda failure: None)
    yield taken


def on_the_simulator(main: object) -> None:
    danaus.sim.run(main, hosts=1)  # type: ignore[arg-type]


def test_a_member_starts_runs_and_stops(arrows):
    def main() -> None:
        mesh = this_host().spawn_procs().spawn("member", Member)
        assert mesh.ping.call_one().get() == 1
        mesh.stop().get()

    on_the_simulator(main)
    assert arrows == [(STARTING, RUNNING), (RUNNING, STOPPING), (STOPPING, STOPPED)]


def test_a_member_whose_init_raises_fails(arrows):
    def main() -> None:
        this_host().spawn_procs().spawn("member", Member, init_raises=True)

    on_the_simulator(main)
    assert arrows[0] == (STARTING, FAILED)


def test_a_member_that_raises_under_broadcast_fails(arrows):
    def main() -> None:
        mesh = this_host().spawn_procs().spawn("member", Member)
        mesh.ping.call_one().get()
        mesh.boom.broadcast()
        time.sleep(1)

    on_the_simulator(main)
    assert arrows[:2] == [(STARTING, RUNNING), (RUNNING, FAILED)]


def test_a_stopping_member_may_still_fail(arrows):
    def main() -> None:
        mesh = this_host().spawn_procs().spawn("member", Member)
        mesh.stop_then_boom.broadcast()
        time.sleep(1)

    on_the_simulator(main)
    assert arrows[:3] == [(STARTING, RUNNING), (RUNNING, STOPPING), (STOPPING, FAILED)]


def test_a_member_stopped_during_init_stops_after_it(arrows):
    def main() -> None:
        mesh = this_host().spawn_procs().spawn("member", Member, init_seconds=5)
        mesh.stop().get()

    on_the_simulator(main)
    assert arrows == [(STARTING, STOPPING), (STOPPING, STOPPED)]


def test_a_member_whose_proc_ends_is_stopped_where_it_stands(arrows):
    def main() -> None:
        procs = this_host().spawn_procs()
        leaving = procs.spawn("leaving", Member)
        staying = procs.spawn("staying", Member)
        starting = procs.spawn("starting", Member, init_seconds=5)
        staying.ping.call_one().get()
        leaving.exit_proc.broadcast()
        time.sleep(1)
        del starting

    on_the_simulator(main)
    assert (RUNNING, STOPPED) in arrows
    assert (STARTING, STOPPED) in arrows


def test_every_arrow_of_the_table_is_taken_by_a_scenario_above():
    """The scenarios above cover the table; should a new arrow appear, a scenario must too."""
    covered = {
        (STARTING, RUNNING),
        (STARTING, FAILED),
        (STARTING, STOPPING),
        (STARTING, STOPPED),
        (RUNNING, STOPPING),
        (RUNNING, FAILED),
        (RUNNING, STOPPED),
        (STOPPING, STOPPED),
        (STOPPING, FAILED),
    }
    assert covered == {(a, b) for a, tos in TRANSITIONS.items() for b in tos}


def lifecycle_in(state: ActorState) -> Lifecycle:
    """A lifecycle put in ``state`` without an actor behind it (its state alone is read)."""
    life = Lifecycle.__new__(Lifecycle)
    life.state = state
    return life


@pytest.mark.parametrize(("before", "after"), list(itertools.product(ActorState, ActorState)))
def test_transition_takes_the_arrows_of_the_table_and_refuses_the_rest(before, after):
    life = lifecycle_in(before)
    allowed = after in TRANSITIONS[before]
    assert life.transition(after) is allowed
    assert life.state is (after if allowed else before)


def test_the_ends_are_final_and_every_state_but_them_can_end():
    assert TRANSITIONS[STOPPED] == TRANSITIONS[FAILED] == frozenset()
    for state in (STARTING, RUNNING, STOPPING):
        assert {STOPPED, FAILED} <= TRANSITIONS[state]


def test_only_transition_writes_the_state():
    """Every assignment to a lifecycle's ``state`` is in `Lifecycle.__init__` or
    `Lifecycle.transition`, and no other module of the package assigns a ``state`` of an
    actor's life."""
    tree = ast.parse(Path(lifecycle.__file__).read_text())
    writers = set()
    for function in ast.walk(tree):
        if isinstance(function, ast.FunctionDef):
            for node in ast.walk(function):
                if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign):
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    if any(isinstance(t, ast.Attribute) and t.attr == "state" for t in targets):
                        writers.add(function.name)
    assert writers == {"__init__", "transition"}
    package = Path(danaus.__file__).parent
    elsewhere = [
        str(path.relative_to(package))
        for path in package.rglob("*.py")
        if "life.state =" in path.read_text()
    ]
    assert elsewhere == []


def test_an_instance_has_no_state_of_its_own_to_write():
    """What `Instance.state` gives is its lifecycle's, read-only."""
    assert "state" not in Instance.__slots__
    assert isinstance(Instance.state, property) and Instance.state.fset is None


def test_the_architecture_page_shows_the_table_of_the_code():
    page = Path(__file__).resolve().parent.parent / "docs" / "architecture.md"
    section = page.read_text().split("## An actor's life")[1].split("\n## ")[0]
    rows = re.findall(r"^\| `(\w+)` \|([^|\n]*)\|", section, re.MULTILINE)
    shown = {
        ActorState(state): frozenset(ActorState(to) for to in re.findall(r"`(\w+)`", tos))
        for state, tos in rows
    }
    assert shown == dict(TRANSITIONS)
