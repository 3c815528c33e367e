"""What the dashboard's page is given: the topology and states from snapshots, who printed each
line, the report files, and a simulated run's views, replayed by seed."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

import danaus.sim
from danaus.admin.views import ActorView, EndedView, FailureView, JobView, LogLine, ProcView
from danaus.dashboard.logs import LogShelf, parse
from danaus.dashboard.page import PageModel, natural, proc_mesh_of
from danaus.dashboard.reports import ReportShelf
from danaus.dashboard.simulated import Replay, SimSource
from danaus.dashboard.sources import SourceUnavailable
from tests.dashboard.programs import simulated

pytestmark = pytest.mark.timeout(60)


def actor(proc: int, hosts: int, gpus: int, handled: int, **fields: object) -> ActorView:
    rank = hosts * 2 + gpus
    return ActorView(
        **{
            "actor_id": f"root:3/w[{rank}]",
            "mesh_id": "root:3",
            "mesh": "w",
            "rank": rank,
            "coords": {"hosts": hosts, "gpus": gpus},
            "class_name": "W",
            "state": "running",
            "mailbox": rank,
            "handled": handled,
            "running": None,
            **fields,
        }
    )


def job(at: float, handled: int, *, lost: bool = False, killed: bool = False) -> JobView:
    """Two hosts with two procs of mesh root:1 each, one actor per proc; the controller on a."""
    procs = [ProcView(proc_id="root", host="a", pid=1, cpu_seconds=at / 10)]
    for rank in range(4):
        hosts, gpus = divmod(rank, 2)
        proc = f"root:1.{rank}"
        if killed and rank == 3:
            continue
        if lost and rank == 2:
            procs.append(ProcView(proc_id=proc, host="b", pid=12, answered=False))
            continue
        procs.append(
            ProcView(
                proc_id=proc,
                host="ab"[hosts],
                pid=10 + rank,
                cpu_seconds=at / 2,
                rss_bytes=2**21,
                threads=5,
                actors=[actor(rank, hosts, gpus, handled * (rank + 1))],
            )
        )
    failures, ended = [], []
    if killed:
        ended = [EndedView("root:1.3", "b", 13, "failed", "proc root:1.3 was killed signal 9")]
        failures = [
            FailureView(
                "root:1.3", "root:3/w[3]", "Killed(sig=9)", "w", 3, at - 1, {"hosts": 1, "gpus": 1}
            ),
            FailureView("root:1.3", "root:1.3", "was killed", seen=at - 1, report="killed 9"),
        ]
    ended.append(EndedView("root:2.0", "a", 20, "stopped", "proc root:2.0 exited exit code 0"))
    return JobView(1, "tcp", at, 0.002, procs, failures, [], ended)


def test_the_topology_is_hosts_proc_meshes_and_actor_meshes_with_rates():
    model = PageModel()
    model.update(job(10.0, handled=100))
    state = model.update(job(12.0, handled=300))
    assert [h.host for h in state.hosts] == ["a", "b"]
    a, b = state.hosts
    assert [m.id for m in a.proc_meshes] == ["root", "root:1"], "a stopped mesh is left out"
    assert [p.id for p in a.proc_meshes[1].procs] == ["root:1.0", "root:1.1"]
    assert [p.id for p in b.proc_meshes[0].procs] == ["root:1.2", "root:1.3"]
    [mesh] = b.proc_meshes[0].actor_meshes
    assert (mesh.name, mesh.class_name, mesh.dims, mesh.states) == (
        "w",
        "W",
        ["hosts", "gpus"],
        {"running": 2},
    )
    cell = mesh.members[1]
    assert (cell.actor, cell.coords, cell.proc, cell.mailbox) == (
        "root:3/w[3]",
        {"hosts": 1, "gpus": 1},
        "root:1.3",
        3,
    )
    assert cell.rate == 400.0, "(300 - 100) * 4 messages over 2 s"
    proc = b.proc_meshes[0].procs[1]
    assert (proc.state, proc.cpu_percent, proc.rss_mib, proc.rate) == ("running", 50.0, 2.0, 400.0)
    assert state.totals.procs == 5 and state.totals.actors == 4 and state.totals.rate == 1000.0
    assert a.states == {"running": 3} and state.failures == []


def test_silent_procs_are_lost_and_killed_ones_failed_with_their_reports():
    model = PageModel()
    state = model.update(job(10.0, handled=1, lost=True, killed=True))
    b = state.hosts[1]
    procs = {p.id: p for p in b.proc_meshes[0].procs}
    assert procs["root:1.2"].state == "lost" and procs["root:1.3"].state == "failed"
    assert procs["root:1.3"].failure == "root:1.3|root:1.3"
    members = {m.actor: m for m in b.proc_meshes[0].actor_meshes[0].members}
    assert set(members) == {"root:3/w[3]"}, "the lost proc's actors are not in its snapshot"
    failed = members["root:3/w[3]"]
    assert (failed.state, failed.failure, failed.coords) == (
        "failed",
        "root:1.3|root:3/w[3]",
        {"hosts": 1, "gpus": 1},
    )
    kinds = {f.key: (f.kind, f.report) for f in state.failures}
    assert kinds == {
        "root:1.3|root:3/w[3]": ("actor", "Killed(sig=9)"),
        "root:1.3|root:1.3": ("proc", "killed 9"),
    }
    assert [f.age_s for f in state.failures] == [1.0, 1.0]
    assert b.states == {"lost": 1, "failed": 1} and state.totals.not_answering == 1


def test_once_nothing_runs_the_procs_that_stopped_are_shown():
    view = job(10.0, handled=1)
    state = PageModel().update(JobView(1, "sim", 10.0, 0.0, [], [], [], view.ended))
    [host] = state.hosts
    assert [(m.id, [p.state for p in m.procs]) for m in host.proc_meshes] == [
        ("root:2", ["stopped"])
    ]


def test_a_restarted_member_stands_where_it_failed():
    view = job(10.0, handled=1)
    old = FailureView("root:1.0", "root:3/w[0]", "boom", "w", 0, 9.0, {"hosts": 0, "gpus": 0})
    lone = FailureView("root:1.1", "root:4/x[0]", "boom", "x", 0, 9.0, actor_class="job.Loader")
    state = PageModel().update(JobView(1, "tcp", 10.0, 0.0, view.procs, [old, lone], []))
    w, x = state.hosts[0].proc_meshes[1].actor_meshes
    assert [m.state for m in w.members] == ["running", "running"]
    assert (x.name, x.class_name, [m.state for m in x.members]) == ("x", "Loader", ["failed"])
    assert [f.key for f in state.failures] == ["root:1.0|root:3/w[0]", "root:1.1|root:4/x[0]"]


def test_ids_sort_and_group_as_people_read_them():
    ordered = ["root", "root:1.9", "root:1.10"]
    assert sorted(["root:1.10", "root:1.9", "root"], key=natural) == ordered
    assert [proc_mesh_of(p) for p in ("root:1.3", "root", "root:12.0")] == [
        "root:1",
        "root",
        "root:12",
    ]


@pytest.mark.parametrize(
    ("text", "who"),
    [
        ("[trainers gpus=3] loss 0.25", ("", "trainers", {"gpus": 3}, "", "loss 0.25", 1)),
        ("[n2 w hosts=1 gpus=0] hi", ("n2", "w", {"hosts": 1, "gpus": 0}, "", "hi", 1)),
        ("[proc root:1.0] starting", ("", "", {}, "root:1.0", "starting", 1)),
        ("[node2 proc root:1.4] up", ("node2", "", {}, "root:1.4", "up", 1)),
        ("[loader] Traceback [x]", ("", "loader", {}, "", "Traceback [x]", 1)),
        ("[64 similar log lines] [trainers] step 7", ("", "trainers", {}, "", "step 7", 64)),
        ("no prefix at all", ("", "", {}, "", "no prefix at all", 1)),
    ],
)
def test_each_line_says_who_printed_it(text, who):
    line = parse(LogLine(4, 1.5, 2, text))
    assert (line.host, line.mesh, line.coords, line.proc, line.text, line.count) == who
    assert (line.seq, line.at, line.stream) == (4, 1.5, 2)


def test_the_log_shelf_keeps_the_newest_parsed_lines():
    shelf = LogShelf()
    assert shelf.add([LogLine(1, 0.0, 1, "[w gpus=0] a"), LogLine(2, 0.0, 1, "b")])[0].mesh == "w"
    assert shelf.newest == 2 and len(shelf.lines) == 2
    shelf.clear()
    assert shelf.newest == 0 and not shelf.lines


def test_reports_are_listed_newest_first_and_served_by_number_only(tmp_path: Path):
    runs = tmp_path / "runs"
    (runs / "seed-7").mkdir(parents=True)
    (runs / "old.html").write_text("<p>old</p>")
    (runs / "seed-7" / "trace.json").write_text("{}")
    (runs / ".hidden.html").write_text("x")
    (runs / "core.bin").write_bytes(b"\0")
    single = tmp_path / "summary.txt"
    single.write_text("12 seeds")
    os.utime(runs / "old.html", (1, 1))
    shelf = ReportShelf([runs, single, tmp_path / "missing"])
    listing = shelf.listing()
    assert [r.name for r in listing][-1] == "old.html"
    assert {r.name for r in listing} == {"old.html", "seed-7/trace.json", "summary.txt"}
    kinds = {r.name: (r.kind, r.folder) for r in listing}
    assert kinds["seed-7/trace.json"] == ("application/json", str(runs))
    assert kinds["summary.txt"] == ("text/plain", str(tmp_path))
    numbers = {r.name: r.id for r in listing}
    assert shelf.file(numbers["summary.txt"]) == single
    assert shelf.file(len(listing)) is None and shelf.file(-1) is None
    single.unlink()
    assert shelf.file(numbers["summary.txt"]) is None


def views_of(events: list, moments: list[float]) -> list[JobView]:
    replay = Replay()
    found = []
    for at in moments:
        replay.fold(events, at)
        found.append(replay.view(seed=5))
    return found


def test_a_replay_shows_a_simulated_run_at_each_moment_the_same_way_twice():
    first = danaus.sim.run(simulated, seed=5)
    second = danaus.sim.run(simulated, seed=5)
    assert first.digest == second.digest
    events = first.trace.events
    end = events[-1].t
    last_step = max(e.t for e in events if e.kind == "recv-call" and e.actor == "root:3")
    moments = [0.0, last_step, end / 2, end]
    views = views_of(events, moments)
    assert views == views_of(second.trace.events, moments)
    start, before_end, _, last = views
    assert [p.proc_id for p in start.procs] == ["root"]
    live = {p.proc_id: [a.actor_id for a in p.actors] for p in before_end.procs}
    assert live["root:1.0"] == ["root:3/step[0]"] and "root:1.2" not in live
    failed = {f.what: f for f in before_end.failures}
    assert failed["root:1.2"].cause.endswith("crashed (a simulated fault)")
    assert (failed["root:3/step[2]"].mesh, failed["root:3/step[2]"].rank) == ("step", 2)
    handled = {a.actor_id: a.handled for p in before_end.procs for a in p.actors}
    assert handled["root:3/step[0]"] == 10 and handled["root:3/step[1]"] == 6
    assert [p.proc_id for p in last.procs] == []
    assert {e.proc_id: e.state for e in last.ended} == {
        "root:1.0": "stopped",
        "root:1.1": "stopped",
        "root:1.2": "failed",
        "root": "stopped",
    }


def test_the_dashboard_of_a_simulated_run_leaves_the_run_as_it_is():
    source = SimSource(simulated, "programs.py::simulated", hosts=1, seed=5)
    source.run.join(60)
    status = source.status()
    assert status.digest == danaus.sim.run(simulated, seed=5).digest
    assert (status.running, status.seed, status.value) == (False, 5, "[0, 3, 6, 9, 12, 6, 7, 8, 9]")
    source.tick()
    view = asyncio.run(source.snapshot())
    assert {e.proc_id for e in view.ended} >= {"root:1.0", "root:1.2"}
    logs = asyncio.run(source.logs(0))
    assert "[step gpus=0] step 9" in [line.text for line in logs.lines]
    assert all(line.at <= status.end for line in logs.lines)

    epoch = source.epoch
    source.seek(status.end / 100)
    assert source.epoch == epoch + 1 and not source.status().following
    early = asyncio.run(source.snapshot())
    assert not early.ended and not early.failures
    assert asyncio.run(source.logs(0)).lines == []
    trace = asyncio.run(source.trace())
    assert trace.events and all(e.t <= status.end / 100 for e in trace.events)
    with pytest.raises(SourceUnavailable, match="no threads"):
        asyncio.run(source.stacks("root"))

    source.start(6)
    source.run.join(60)
    assert source.epoch == epoch + 2 and source.status().seed == 6
    assert source.status().digest == danaus.sim.run(simulated, seed=6).digest


def test_while_a_run_goes_only_its_own_thread_prints_into_its_logs():
    import io
    import threading

    from danaus.dashboard.simulated import _ByThread

    run, others = io.StringIO(), io.StringIO()
    output = _ByThread(run, others)
    output.write("from the run\n")
    elsewhere = threading.Thread(target=output.write, args=("the dashboard's link\n",))
    elsewhere.start()
    elsewhere.join()
    assert (run.getvalue(), others.getvalue()) == ("from the run\n", "the dashboard's link\n")
