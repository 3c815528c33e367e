"""The admin view's data: snapshots of a live job, the model `danaus top` draws, and its socket."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import stat
import subprocess

import msgspec
import pytest

import danaus
from danaus import Actor, Channel, endpoint, this_host
from danaus.admin import jobfile, protocol
from danaus.admin.model import TopModel
from danaus.admin.views import ActorView, FailureView, JobView, ProcView
from danaus.transports.tcp.admin import AdminClient
from danaus.transports.tcp.security import JobKeys
from tests.observe.conftest import PYTHON, program, wait_for

pytestmark = pytest.mark.timeout(120)


class Gate(Actor):
    """Holds its thread in ``hold`` until its port is sent something."""

    def __init__(self) -> None:
        self.port, self.receiver = Channel.open()

    @endpoint
    def opener(self) -> object:
        return self.port

    @endpoint
    def hold(self) -> str:
        return self.receiver.recv().get()

    @endpoint
    def ping(self) -> int:
        return 1


class Flaky(Actor):
    @endpoint
    def boom(self) -> None:
        raise RuntimeError("disk full on /scratch")


def snapshot(client: AdminClient) -> JobView:
    view = client.ask(protocol.Snapshot(), timeout=10)
    assert isinstance(view, JobView)
    return view


def test_a_snapshot_shows_procs_actors_states_mailboxes_and_failures(tcp_job, monkeypatch):
    monkeypatch.setattr(danaus, "unhandled_fault_hook", lambda failure: None)
    tcp_job()
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    gates = procs.spawn("gate", Gate)
    flaky = procs.slice(gpus=1).spawn("flaky", Flaky)
    flaky.boom.broadcast()
    gate = gates.slice(gpus=0)
    opener = gate.opener.call_one().get()
    held = gate.hold.call_one()
    pings = [gate.ping.call_one() for _ in range(3)]

    def blocked(client: AdminClient) -> JobView | None:
        view = snapshot(client)
        holding = [a for p in view.procs for a in p.actors if a.running == "hold"]
        return view if view.failures and [a.mailbox for a in holding] == [3] else None

    with AdminClient(jobfile.find()) as client:
        try:
            view = wait_for(
                lambda: blocked(client), 30, "the gate to hold 3 pings and the flaky actor to fail"
            )
        finally:
            opener.send("open")
        assert view.pid == os.getpid() and view.transport == "tcp"
        assert [p.proc_id == "root" for p in view.procs] == [True, False, False]
        workers = view.procs[1:]
        assert all(p.answered and p.pid and p.rss_bytes > 0 and p.cpu_seconds > 0 for p in workers)
        assert len({p.pid for p in view.procs}) == 3
        actors = {a.actor_id: a for p in view.procs for a in p.actors}
        holding = next(a for a in actors.values() if a.running == "hold")
        assert (holding.mesh, holding.coords, holding.state, holding.mailbox) == (
            "gate",
            {"gpus": 0},
            "running",
            3,
        )
        other = next(a for a in actors.values() if a.mesh == "gate" and a.rank == 1)
        assert (other.state, other.mailbox, other.running) == ("running", 0, None)
        [failure] = view.failures
        assert failure.mesh == "flaky" and "disk full on /scratch" in failure.cause
        assert not any(a.mesh == "flaky" for a in actors.values())

        assert held.get(timeout=30) == "open"
        assert [p.get(timeout=30) for p in pings] == [1, 1, 1]
        view = snapshot(client)
        holding = next(a for p in view.procs for a in p.actors if a.actor_id == holding.actor_id)
        assert (holding.running, holding.mailbox, holding.handled) == (None, 0, 5)
        assert [f.what for f in view.failures] == [failure.what]

        model = TopModel()
        model.update(view)
        meshes = {m.mesh: m for m in model.meshes()}
        assert meshes["gate"].states == "running 2" and meshes["flaky"].states == "failed 1"
        assert [h.procs for h in model.hosts()] == [3]


def view_at(at: float, handled: int, cpu: float, answered: bool = True) -> JobView:
    actor = ActorView(
        actor_id="root:3/w[0]",
        mesh_id="root:3",
        mesh="w",
        rank=0,
        coords={"gpus": 0},
        class_name="W",
        state="running",
        mailbox=2,
        handled=handled,
        running="step",
    )
    procs = [
        ProcView(proc_id="root", host="a", pid=1, cpu_seconds=cpu, rss_bytes=2**20),
        ProcView(
            proc_id="root:1.0",
            host="b",
            pid=2,
            cpu_seconds=cpu * 2,
            rss_bytes=3 * 2**20,
            actors=[actor],
        )
        if answered
        else ProcView(proc_id="root:1.0", answered=False),
    ]
    failure = FailureView(
        proc="root:1.1", what="root:1.1", cause="proc root:1.1 was killed", seen=at - 3
    )
    return JobView(
        pid=1,
        transport="tcp",
        at=at,
        gather_seconds=0.01,
        procs=procs,
        failures=[failure],
        sessions=[],
    )


def test_rates_come_from_two_snapshots_and_silent_procs_are_shown():
    model = TopModel()
    assert model.procs() == [] and "waiting" in model.summary()
    model.update(view_at(10.0, handled=100, cpu=1.0))
    assert [p.messages_per_s for p in model.procs()] == [0.0, 0.0]
    model.update(view_at(12.0, handled=300, cpu=2.0))
    root, worker = model.procs()
    assert (root.cpu_percent, worker.cpu_percent) == (50.0, 100.0)
    assert (worker.messages_per_s, worker.mailbox, worker.rss_mib) == (100.0, 2, 3.0)
    assert [(a.rank, a.messages_per_s, a.running) for a in model.actors()] == [
        ("gpus=0", 100.0, "step")
    ]
    assert [(h.host, h.procs) for h in model.hosts()] == [("a", 1), ("b", 1)]
    assert [(f.age_s, f.what) for f in model.failures()] == [(3.0, "root:1.1")]
    summary = model.summary()
    assert "100 msg/s" in summary and "| 2 hosts |" in summary and "| 1 failure" in summary
    assert "(s)" not in summary
    model.update(view_at(13.0, handled=300, cpu=2.0, answered=False))
    assert [p.answered for p in model.procs()] == [True, False]
    assert "1 not answering" in model.summary()


def test_the_job_file_is_private_and_goes_away_at_shutdown(tcp_job, tmp_path):
    tcp_job()
    [(path, job)] = jobfile.running()
    assert job.pid == os.getpid() and job.address.startswith("tcp://127.0.0.1:")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    path.chmod(0o644)
    with pytest.raises(PermissionError, match="open to other users"):
        jobfile.find()
    path.chmod(0o600)
    assert jobfile.find(str(os.getpid())) == job
    danaus.shutdown()
    assert not path.exists()
    with pytest.raises(LookupError, match="no Danaus job running"):
        jobfile.find()


def test_the_admin_socket_admits_only_the_job_files_key(tcp_job, caplog):
    tcp_job()
    job = jobfile.find()
    stranger = JobKeys.generate()
    forged = msgspec.structs.replace(
        job, public_key=stranger.public.decode(), secret_key=stranger.secret.decode()
    )
    with caplog.at_level(logging.WARNING, logger="danaus.security"), AdminClient(forged) as client:
        with pytest.raises(TimeoutError):
            client.ask(protocol.Snapshot(), timeout=2)
        wait_for(
            lambda: any("admin socket" in r.getMessage() for r in caplog.records),
            10,
            "the refusal to be logged",
        )
    with AdminClient(job) as client:
        client._socket.send_multipart([b"7", b"\x93not a request"])
        assert client._socket.poll(10_000)
        request_id, body = client._socket.recv_multipart()
        answer = protocol.decode_answer(body)
        assert request_id == b"7" and isinstance(answer, protocol.Refused)
        assert "bad admin request" in answer.reason
        assert isinstance(client.ask(protocol.ListSessions(), timeout=10), protocol.Sessions)


def test_top_draws_its_tables_from_each_snapshot_and_pauses():
    from textual.widgets import DataTable, Static

    from danaus.admin.top import TopApp

    views = [view_at(10.0, handled=100, cpu=1.0), view_at(12.0, handled=300, cpu=2.0)]
    asked = []

    def source() -> JobView:
        asked.append(len(asked))
        return views[min(len(asked), len(views)) - 1]

    async def drive() -> None:
        app = TopApp(source, interval=3600)
        async with app.run_test(size=(160, 60)) as pilot:
            await app.workers.wait_for_complete()
            await pilot.pause()
            app.fetch()
            await app.workers.wait_for_complete()
            await pilot.pause()
            procs = app.query_one("#procs", DataTable)
            assert [procs.get_row_at(i)[0] for i in range(procs.row_count)] == ["root", "root:1.0"]
            assert procs.get_row_at(1)[3:8] == ["100", "3", "1", "2", "100"]
            actors = app.query_one("#actors", DataTable)
            row = ["root:3/w[0]", "gpus=0", "root:1.0", "running", "2", "100", "step"]
            assert actors.get_row_at(0) == row
            failures = app.query_one("#failures", DataTable)
            assert failures.get_row_at(0)[2:] == ["root:1.1", "proc root:1.1 was killed"]
            summary = str(app.query_one("#summary", Static).render())
            assert "2 procs" in summary and "100 msg/s" in summary
            await pilot.press("p")
            assert app.paused
            app.fetch()
            await app.workers.wait_for_complete()
            assert len(asked) == 2
            await pilot.press("q")
        assert app.return_code == 0

    asyncio.run(drive())


def test_the_tools_say_so_when_no_job_runs(job_env):
    for tool in ("top", "debug"):
        done = subprocess.run(
            [PYTHON, "-m", "danaus.cli", tool],
            env=job_env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 1 and "no Danaus job running" in done.stderr, done.stderr


SIGNALLED = """
import os, signal, sys, time
import danaus
from danaus import this_host

if sys.argv[1] == "handler":
    def handler(signum, frame):
        print("the program's own handler", flush=True)
        sys.exit(3)

    signal.signal(signal.SIGTERM, handler)
danaus.configure(transport="tcp")
this_host().spawn_procs(per_host={"w": 1}).initialized.get(timeout=60)
print("ready", flush=True)
while True:
    time.sleep(0.05)
"""


@pytest.mark.parametrize(
    ("how", "signum", "code", "printed"),
    [
        ("default", signal.SIGTERM, -signal.SIGTERM, ""),
        ("handler", signal.SIGTERM, 3, "the program's own handler"),
        ("default", signal.SIGINT, 1, "KeyboardInterrupt"),
    ],
)
def test_a_controller_ended_by_a_signal_takes_its_job_file_along(
    job_env, tmp_path, how, signum, code, printed
):
    """The file holds the admin key: SIGTERM and SIGINT remove it, then do what they would
    have done (end the process, run the program's handler, raise KeyboardInterrupt)."""
    jobs = tmp_path / "jobs"
    script = program(tmp_path, SIGNALLED)
    controller = subprocess.Popen(
        [PYTHON, script, how],
        env=job_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert controller.stdout.readline().strip() == "ready"
        [job_file] = list(jobs.glob("*.job"))
        controller.send_signal(signum)
        output = controller.communicate(timeout=30)[0]
    finally:
        controller.kill()
    assert controller.returncode == code, output
    assert printed in output
    assert not job_file.exists()


def test_the_tools_sweep_job_files_whose_controller_is_gone(job_env, monkeypatch):
    """Gone: no process has the pid, or the process that has it started at another time."""
    monkeypatch.setenv("DANAUS_JOBS_DIR", job_env["DANAUS_JOBS_DIR"])
    ended = subprocess.run([PYTHON, "-c", "import os; print(os.getpid())"], capture_output=True)
    me = jobfile.JobFile(
        pid=os.getpid(),
        host=socket.gethostname(),
        address="tcp://127.0.0.1:1",
        public_key="",
        secret_key="",
        started=0.0,
        argv=[],
        transport="tcp",
        pid_started=jobfile.process_started(os.getpid()),
    )
    live = jobfile.write(me)
    dead = jobfile.write(msgspec.structs.replace(me, pid=int(ended.stdout)))
    reused = jobfile.write(msgspec.structs.replace(me, pid=os.getppid(), pid_started=1.0))
    assert [path for path, _ in jobfile.running()] == [live]
    assert not dead.exists() and not reused.exists()
    with pytest.raises(LookupError, match="has ended"):
        jobfile.find(
            str(jobfile.write(msgspec.structs.replace(me, pid=os.getppid(), pid_started=1.0)))
        )
    assert list(live.parent.glob("*.job")) == [live]
