"""What the admin socket gives beyond snapshots: stacks, profiles, output lines, the trace, and
what a killed proc leaves in a snapshot."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest

import danaus
from danaus import Actor, endpoint, this_host
from danaus.admin import jobfile, protocol
from danaus.admin.logs import LogBook
from danaus.admin.stacks import format_stacks
from danaus.admin.views import JobView, LogsView, ProfileView, StacksView, TraceView
from danaus.transports.tcp.admin import AdminClient
from tests.observe.conftest import wait_for
from tests.observe.test_admin import view_at

pytestmark = pytest.mark.timeout(120)


class Spinner(Actor):
    @endpoint
    def pid(self) -> int:
        return os.getpid()

    @endpoint
    def say(self, text: str) -> None:
        print(text, flush=True)

    @endpoint
    def crunch_numbers(self, stop: str) -> int:
        """Spin in Python until the file ``stop`` exists."""
        turns = 0
        while not os.path.exists(stop):
            turns += 1
        return turns


def ask(client: AdminClient, request: protocol.Request, kind: type) -> object:
    return protocol.expect(client.ask(request, timeout=30), kind)


def test_stacks_and_profiles_of_a_busy_proc_name_what_it_runs(tcp_job, tmp_path: Path):
    tcp_job()
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    spinners = procs.spawn("spinner", Spinner)
    spinners.pid.call().get(timeout=60)
    stop = tmp_path / "stop"
    busy = spinners.slice(gpus=1).crunch_numbers.call_one(str(stop))
    with AdminClient(jobfile.find()) as client:
        try:
            [proc] = [
                p.proc_id
                for p in wait_for(
                    lambda: [
                        p
                        for p in ask(client, protocol.Snapshot(), JobView).procs
                        if any(a.running == "crunch_numbers" for a in p.actors)
                    ],
                    30,
                    "a proc to run crunch_numbers",
                )
            ]
            stacks = ask(client, protocol.Stacks(proc), StacksView)
            assert stacks.proc == proc and stacks.pid != os.getpid()
            threads = stacks.threads
            frames = {t.name: [f for f in t.frames if "crunch" in f.function] for t in threads}
            [spinning] = [name for name, found in frames.items() if found]
            assert spinning == "danaus-actor-root:3/spinner[1]"
            [frame] = frames[spinning]
            assert frame.function == "Spinner.crunch_numbers"
            assert frame.code in ("while not os.path.exists(stop):", "turns += 1")
            assert "Spinner.crunch_numbers" in format_stacks(stacks)
            root = ask(client, protocol.Stacks("root"), StacksView)
            assert root.pid == os.getpid()
            assert not [f for t in root.threads for f in t.frames if f.function == "thread_stacks"]

            profile = ask(client, protocol.Profile(proc, 0.5, 100.0), ProfileView)
            assert 40 <= profile.samples <= 51
            on_it = sum(n for stack, n in profile.stacks.items() if "crunch_numbers" in stack)
            assert on_it >= profile.samples * 0.8
            assert not any("danaus-profile" in stack for stack in profile.stacks)
        finally:
            stop.touch()
    assert busy.get(timeout=30) > 0


def test_requests_for_what_cannot_be_are_refused(tcp_job):
    tcp_job()
    with AdminClient(jobfile.find()) as client:
        for request in (
            protocol.Stacks("root:99.0"),
            protocol.Profile("root", 31.0, 100.0),
            protocol.Profile("root", 1.0, 0.0),
        ):
            answer = client.ask(request, timeout=10)
            assert isinstance(answer, protocol.Refused), request
        with pytest.raises(protocol.RequestRefused, match=r"no live proc 'root:99\.0'"):
            protocol.expect(client.ask(protocol.Stacks("root:99.0"), timeout=10), StacksView)


def test_output_lines_are_kept_numbered_for_tools(tcp_job):
    tcp_job()
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    spinners = procs.spawn("spinner", Spinner)
    spinners.say.call("hello from a rank").get(timeout=60)
    with AdminClient(jobfile.find()) as client:

        def both() -> LogsView | None:
            logs = ask(client, protocol.Logs(0), LogsView)
            found = sum("hello from a rank" in line.text for line in logs.lines)
            return logs if found == 2 else None

        logs = wait_for(both, 30, "both ranks' lines")
        texts = sorted(line.text for line in logs.lines if "hello" in line.text)
        assert texts == [
            "[spinner gpus=0] hello from a rank",
            "[spinner gpus=1] hello from a rank",
        ]
        assert all(line.stream == 1 for line in logs.lines if "hello" in line.text)
        later = ask(client, protocol.Logs(logs.newest), LogsView)
        assert later.lines == [] and later.newest == logs.newest and later.skipped == 0


def test_a_log_book_keeps_the_newest_lines_and_says_how_many_it_dropped():
    book = LogBook(capacity=3, clock=lambda: 7.0)
    book.write(1, "a\nb\n")
    book.write(2, "c\nd\ne\n")
    view = book.after(0)
    assert [(line.seq, line.stream, line.text) for line in view.lines] == [
        (3, 2, "c"),
        (4, 2, "d"),
        (5, 2, "e"),
    ]
    assert (view.newest, view.skipped) == (5, 2)
    assert book.after(4).lines == [book.after(0).lines[-1]] and book.after(5).lines == []
    assert [line.seq for line in book.after(0, limit=1).lines] == [5]
    seen: list[tuple[int, str]] = []
    tee = book.tee(lambda stream, text: seen.append((stream, text)))
    tee(1, "f\n")
    assert seen == [(1, "f\n")] and book.after(5).lines[0].text == "f"


def test_a_killed_proc_shows_as_failed_with_its_actors_reports(tcp_job, monkeypatch):
    monkeypatch.setattr(danaus, "unhandled_fault_hook", lambda failure: None)
    tcp_job()
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    spinners = procs.spawn("spinner", Spinner)
    pids = spinners.pid.call().get(timeout=60)
    victim = pids.item(gpus=1)
    os.kill(victim, signal.SIGKILL)
    with AdminClient(jobfile.find()) as client:

        def snapshot_where(condition) -> JobView | None:
            view = ask(client, protocol.Snapshot(), JobView)
            return view if condition(view) else None

        view = wait_for(lambda: snapshot_where(lambda v: v.ended), 30, "the proc to be gone")
        [ended] = view.ended
        assert (ended.pid, ended.state, ended.host) == (victim, "failed", view.procs[0].host)
        assert ended.proc_id not in [p.proc_id for p in view.procs]
        view = wait_for(
            lambda: snapshot_where(lambda v: len(v.failures) == 2),
            30,
            "the proc's loss and its actor's failure",
        )
        by_what = {f.what: f for f in view.failures}
        assert by_what[ended.proc_id].report == by_what[ended.proc_id].cause
        [actor] = [f for f in view.failures if f.what != ended.proc_id]
        assert (actor.proc, actor.mesh, actor.rank, actor.coords) == (
            ended.proc_id,
            "spinner",
            1,
            {"gpus": 1},
        )
        assert "Killed(sig=9)" in actor.report and "mesh 'spinner' rank gpus=1" in actor.report
        assert actor.actor_class == "tests.observe.test_inspect.Spinner"


def test_the_trace_comes_from_every_proc_when_the_job_records_it(tcp_job):
    tcp_job(trace=True)
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    procs.spawn("spinner", Spinner).pid.call().get(timeout=60)
    with AdminClient(jobfile.find()) as client:
        trace = ask(client, protocol.Trace(), TraceView)
    assert trace.recording
    spawned = sorted(e.proc for e in trace.events if e.kind == "spawn")
    assert spawned == ["root:1.0", "root:1.1"]
    assert [e.t for e in trace.events] == sorted(e.t for e in trace.events)


def test_a_job_that_does_not_record_says_so(tcp_job):
    tcp_job()
    with AdminClient(jobfile.find()) as client:
        trace = ask(client, protocol.Trace(), TraceView)
    assert (trace.recording, trace.events) == (False, [])


def test_top_shows_the_stacks_of_the_proc_under_the_cursor():
    from textual.widgets import DataTable, Static

    from danaus.admin.top import StacksScreen, TopApp
    from danaus.admin.views import FrameView, ThreadView

    asked: list[str] = []

    def stacks(proc: str) -> StacksView:
        asked.append(proc)
        frame = FrameView("Trainer.step", "/job/train.py", 12, "loss = model(batch)")
        thread = ThreadView(1, "danaus-actor-root:3/w[0]", True, [frame])
        return StacksView(proc=proc, pid=2, threads=[thread], taken_seconds=0.001)

    async def drive() -> None:
        app = TopApp(lambda: view_at(10.0, handled=1, cpu=1.0), interval=3600, stacks=stacks)
        async with app.run_test(size=(160, 60)) as pilot:
            await app.workers.wait_for_complete()
            await pilot.pause()
            app.query_one("#procs", DataTable).move_cursor(row=1)
            await pilot.press("s")
            await app.workers.wait_for_complete()
            await pilot.pause()
            assert isinstance(app.screen, StacksScreen)
            text = str(app.screen.query_one("#stacks", Static).render())
            assert "Trainer.step" in text and "loss = model(batch)" in text
            await pilot.press("escape")
            assert not isinstance(app.screen, StacksScreen)
            await pilot.press("q")

    asyncio.run(drive())
    assert asked == ["root:1.0"]
    danaus.shutdown()
