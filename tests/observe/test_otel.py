"""OpenTelemetry: spans of calls linked from caller to callee across procs, and metrics."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import danaus.sim
from danaus import Actor, ActorError, endpoint, this_host
from danaus.core.agent_refs import agent_of

otel = pytest.importorskip("danaus.otel")

pytestmark = pytest.mark.timeout(120)


class Echo(Actor):
    @endpoint
    def echo(self, value: int) -> int:
        if value < 0:
            raise ValueError("negative")
        return value


class Relay(Actor):
    """Handles a call by making one to another mesh: its span's child is that call's."""

    @endpoint
    def relay(self, target: object, value: int) -> int:
        return target.echo.call_one(value).get() + 1


@pytest.fixture
def memory_otel() -> Iterator[object]:
    observer = otel.enable("memory")
    try:
        yield observer
    finally:
        otel.disable()


def relay_twice() -> list[int]:
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    relay = procs.slice(gpus=0).spawn("relay", Relay)
    echo = procs.slice(gpus=1).spawn("echo", Echo)
    values = [relay.relay.call_one(echo, 41).get()]
    try:
        echo.echo.call_one(-1).get()
    except ActorError:
        values.append(-1)
    return values


def metrics_now() -> dict[str, object]:
    """This process's metrics by name, as its in-memory reader has them now."""
    return {
        m.name: m
        for resource in otel.observer().metrics.get_metrics_data().resource_metrics
        for scope in resource.scope_metrics
        for m in scope.metrics
    }


def relay_and_measure() -> tuple[list[int], list[str]]:
    """`relay_twice`, and the actors the mailbox gauge reports while they live."""
    values = relay_twice()
    gauge = metrics_now()["danaus.mailbox.depth"].data.data_points
    return values, sorted(p.attributes["danaus.mesh"] for p in gauge if p.value == 0)


def chain(spans: list[dict]) -> list[tuple[str, str, str]]:
    """The spans of the relayed call, parent first: (kind, name, proc)."""
    by_id = {s["span_id"]: s for s in spans}
    leaf = next(s for s in spans if s["name"] == "handle echo.echo" and s["ok"])
    found = []
    while leaf is not None:
        found.append(leaf)
        leaf = by_id.get(leaf["parent_id"])
    assert len({s["trace_id"] for s in found}) == 1
    return [(s["kind"], s["name"], s["attributes"]["danaus.proc"]) for s in reversed(found)]


def test_a_call_made_while_handling_one_is_its_child_across_simulated_procs(memory_otel):
    run = danaus.sim.run(relay_and_measure, seed=3)
    assert run.value == ([42, -1], ["echo", "relay"])
    spans = otel.spans_here()
    relay_proc = next(s for s in spans if s["name"] == "handle relay.relay")["attributes"]
    echo_proc = next(s for s in spans if s["name"] == "handle echo.echo")["attributes"]
    assert chain(spans) == [
        ("CLIENT", "call relay", "root"),
        ("SERVER", "handle relay.relay", relay_proc["danaus.proc"]),
        ("CLIENT", "call echo", relay_proc["danaus.proc"]),
        ("SERVER", "handle echo.echo", echo_proc["danaus.proc"]),
    ]
    assert relay_proc["danaus.proc"] != echo_proc["danaus.proc"] != "root"
    failed = [s for s in spans if not s["ok"]]
    assert [s["name"] for s in failed] == ["handle echo.echo"]
    metrics = metrics_now()
    handled = {
        p.attributes["danaus.method"]: p.value
        for p in metrics["danaus.calls.handled"].data.data_points
    }
    assert handled["relay"] == 1 and handled["echo"] == 2
    durations = {
        p.attributes["danaus.method"]: p.count
        for p in metrics["danaus.call.duration"].data.data_points
    }
    assert (durations["relay"], durations["echo"]) == (1, 2)


def test_spans_link_across_real_processes(tmp_path, monkeypatch, memory_otel):
    monkeypatch.setenv("DANAUS_JOBS_DIR", str(tmp_path / "jobs"))
    danaus.configure(transport="tcp")
    try:
        procs = this_host().spawn_procs(per_host={"gpus": 2})
        relay = procs.slice(gpus=0).spawn("relay", Relay)
        echo = procs.slice(gpus=1).spawn("echo", Echo)
        assert relay.relay.call_one(echo, 41).get() == 42
        workers = sorted(danaus.core.config.current_world().children.procs())
        spans = otel.spans_here()
        for proc in workers:
            spans += agent_of(proc).probe.call_one(otel.spans_here).get(timeout=30)
        assert [name for _, name, _ in chain(spans)] == [
            "call relay",
            "handle relay.relay",
            "call echo",
            "handle echo.echo",
        ]
        pids = [
            next(s["pid"] for s in spans if s["name"] == n) for n in ("call relay", "call echo")
        ]
        assert len(set(pids)) == 2
        assert [proc for *_, proc in chain(spans)][1:3] == [workers[0]] * 2
    finally:
        danaus.shutdown()


def test_with_instrumentation_off_calls_carry_nothing():
    run = danaus.sim.run(relay_twice, seed=3)
    assert run.value == [42, -1]
    assert otel.spans_here() == []
