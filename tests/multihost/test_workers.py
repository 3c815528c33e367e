"""Workers and attach on loopback: the life of a worker, and who it lets in.

Each worker here is a real ``danaus worker`` process listening on 127.0.0.1;
the controller is this test process (or a script of its own, where the test
needs to kill it). Tests that need hosts of their own are in ``test_cluster.py``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import zmq

import danaus
from danaus import Actor, SupervisionError, current_rank, endpoint
from danaus.core.actor_mesh import placement_of
from tests.multihost.conftest import FAST, ROOT, Worker
from tests.multihost.lost_hosts import LOST, VICTIM, stop_losing_a_host
from tests.tcp.conftest import alive, run_script, wait_until


class Where(Actor):
    @endpoint
    def pid(self) -> int:
        return os.getpid()

    @endpoint
    def shout(self, text: str) -> None:
        print(text, flush=True)

    @endpoint
    def parent(self) -> int:
        return os.getppid()


def test_attach_spawn_stop_and_attach_again(workers, controller):
    worker = workers()
    controller()
    seen = []
    for _ in range(2):
        hosts = danaus.attach_to_workers(workers=[worker.address], key=worker.key)
        assert hosts.sizes == {"hosts": 1}
        hosts.initialized.get(timeout=60)
        procs = hosts.spawn_procs(per_host={"gpus": 2})
        pids = list(procs.spawn("w", Where).pid.call().get(timeout=60).values())
        assert set(pids) <= set(worker.group())
        hosts.stop().get(timeout=60)
        wait_until(lambda p=pids: not any(map(alive, p)), 30, "the procs to end with the stop")
        seen.append(pids)
    assert worker.process.poll() is None, "stop() leaves the worker waiting for another controller"
    assert set(seen[0]).isdisjoint(seen[1])


def fork_servers(worker: Worker) -> dict[int, str]:
    """The fork servers in the worker's tree, with their command lines (the procs they forked
    run the same command, as children of a server)."""
    lines = {}
    for pid in worker.group():
        with contextlib.suppress(OSError):
            lines[pid] = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    servers = {pid: line for pid, line in lines.items() if "danaus.transports.tcp.forker" in line}
    return {pid: line for pid, line in servers.items() if parent_of(pid) not in servers}


def parent_of(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except OSError:
        return None


def test_the_next_job_is_forked_by_a_server_started_before_it_attached(workers, controller):
    """The waiting host agent starts the last job's fork server, with its preloads, ahead."""
    worker = workers()
    controller(preload=["colorsys"])
    hosts = danaus.attach_to_workers(workers=[worker.address], key=worker.key)
    first = hosts.spawn_procs().spawn("w", Where).parent.call_one().get(timeout=60)
    hosts.stop().get(timeout=60)

    def early_server() -> int | None:
        found = [pid for pid, line in fork_servers(worker).items() if "colorsys" in line]
        return found[0] if len(found) == 1 and found[0] != first else None

    wait_until(lambda: early_server() is not None, 60, "the next host agent's fork server")
    early = early_server()
    hosts = danaus.attach_to_workers(workers=[worker.address], key=worker.key)
    assert hosts.spawn_procs().spawn("w", Where).parent.call_one().get(timeout=60) == early


def test_a_worker_is_attached_once(workers, controller):
    worker = workers()
    controller()
    hosts = danaus.attach_to_workers(workers=[worker.address], key=worker.key)
    again = danaus.attach_to_workers(workers=[worker.address], key=worker.key)
    with pytest.raises(SupervisionError, match="this controller is already"):
        again.initialized.get(timeout=60)
    hosts.initialized.get(timeout=60)
    hosts.stop().get(timeout=60)
    danaus.attach_to_workers(workers=[worker.address], key=worker.key).initialized.get(timeout=60)


def test_shutdown_ends_the_worker(workers, controller):
    worker = workers()
    controller()
    hosts = danaus.attach_to_workers(workers=[worker.address], key=worker.key)
    hosts.spawn_procs().initialized.get(timeout=60)
    hosts.shutdown().get(timeout=60)
    assert worker.process.wait(30) == 0
    with pytest.raises(RuntimeError, match="reference"):
        hosts.slice(hosts=0).shutdown()


def test_several_workers_make_one_mesh_with_dimension_hosts(workers, controller):
    controller()
    key = danaus.make_job_key()
    one, two = workers(key), workers(key)
    hosts = danaus.attach_to_workers(workers=[one.address, two.address], key=key)
    ranks = hosts.spawn_procs(per_host={"gpus": 2}).spawn("w", RankOf).rank.call().get(timeout=60)
    assert list(ranks.values()) == [
        {"hosts": 0, "gpus": 0},
        {"hosts": 0, "gpus": 1},
        {"hosts": 1, "gpus": 0},
        {"hosts": 1, "gpus": 1},
    ]


class RankOf(Actor):
    @endpoint
    def rank(self) -> dict[str, int]:
        return dict(current_rank())


def test_a_controller_with_another_key_is_refused_and_the_refusal_logged(workers, controller):
    worker = workers()
    controller()
    hosts = danaus.attach_to_workers(workers=[worker.address], key=danaus.make_job_key())
    with pytest.raises(SupervisionError, match="refused this controller's key"):
        hosts.initialized.get(timeout=60)
    worker.wait_for_output("its key is not the job's", 30)
    good = danaus.attach_to_workers(workers=[worker.address], key=worker.key)
    good.initialized.get(timeout=60)


def test_a_listener_without_the_key_is_not_taken_for_a_worker(controller):
    """The controller trusts only a worker that proves it holds the job's key."""
    impostor = zmq.Context.instance().socket(zmq.ROUTER)
    public, secret = zmq.curve_keypair()
    impostor.curve_server, impostor.curve_secretkey, impostor.curve_publickey = True, secret, public
    port = impostor.bind_to_random_port("tcp://127.0.0.1")
    controller()
    try:
        hosts = danaus.attach_to_workers(
            workers=[f"127.0.0.1:{port}"], key=danaus.make_job_key(), timeout=10
        )
        with pytest.raises(SupervisionError, match="could not be attached"):
            hosts.initialized.get(timeout=60)
        assert impostor.poll(100) == 0, "nothing reached the impostor"
    finally:
        impostor.close(0)


def test_garbage_from_a_stranger_is_refused_and_logged(workers, controller):
    worker = workers()
    host, port = worker.address.removeprefix("tcp://").rsplit(":", 1)
    with socket.create_connection((host, int(port))) as raw:
        raw.sendall(os.urandom(4096))
        raw.settimeout(30)
        try:
            while raw.recv(4096):
                pass  # the worker's greeting, then it hangs up
        except ConnectionError:
            pass
    worker.wait_for_output("refused a connection from", 30)
    controller()
    danaus.attach_to_workers(workers=[worker.address], key=worker.key).initialized.get(timeout=60)


def test_a_stranger_who_knows_the_workers_public_key_is_refused(workers, controller):
    """It completes CURVE's cryptography, but its own key is not the job's: nothing gets in."""
    worker = workers()
    stranger = zmq.Context.instance().socket(zmq.DEALER)
    public, secret = zmq.curve_keypair()
    stranger.curve_serverkey = zmq.curve_public(worker.key.encode())
    stranger.curve_publickey, stranger.curve_secretkey = public, secret
    stranger.connect(worker.address)
    stranger.send(b"\x93\xa6attach", zmq.NOBLOCK)
    try:
        worker.wait_for_output("not a member of this job", 30)
        assert stranger.poll(0) == 0
    finally:
        stranger.close(0)
    controller()
    danaus.attach_to_workers(workers=[worker.address], key=worker.key).initialized.get(timeout=60)


def test_a_busy_worker_refuses_a_second_controller_until_the_first_is_done(workers, tmp_path):
    worker = workers()
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD.format(address=worker.address)],
        cwd=ROOT,
        env={**os.environ, "DANAUS_JOB_KEY": worker.key, "DANAUS_TRANSPORT": "tcp"},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "attached"
        result = run_script(
            SECOND.format(address=worker.address), tmp_path, DANAUS_JOB_KEY=worker.key
        )
        assert "busy" in result.stdout, result.stdout + result.stderr
    finally:
        holder.kill()
        holder.wait()


HOLD = """
import time, danaus
hosts = danaus.attach_to_workers(workers=["{address}"])
hosts.initialized.get(timeout=60)
print("attached", flush=True)
time.sleep(600)
"""

SECOND = """
import danaus
try:
    danaus.attach_to_workers(workers=["{address}"], timeout=2).initialized.get(timeout=60)
except danaus.SupervisionError as exc:
    print(exc)
"""


def test_a_vanished_controller_leaves_nothing_behind_and_the_worker_waits(workers, tmp_path):
    worker = workers()
    script = tmp_path / "vanish.py"
    script.write_text(VANISH.format(address=worker.address, root=ROOT))
    vanishing = subprocess.Popen(
        [sys.executable, str(script)],
        cwd=ROOT,
        env={**os.environ, "DANAUS_JOB_KEY": worker.key, "DANAUS_TRANSPORT": "tcp"},
        stdout=subprocess.PIPE,
        text=True,
    )
    assert vanishing.stdout is not None
    pids = [int(pid) for pid in vanishing.stdout.readline().split()]
    assert pids and set(pids) <= set(worker.group())
    vanishing.send_signal(signal.SIGKILL)
    vanishing.wait()
    wait_until(lambda: not any(map(alive, pids)), 30, "the vanished controller's procs to end")
    worker.wait_for_output("ended", 30)
    result = run_script(
        AGAIN.format(address=worker.address, root=ROOT), tmp_path, DANAUS_JOB_KEY=worker.key
    )
    assert result.stdout.split() == ["2"], result.stderr


VANISH = """
import sys
sys.path.insert(0, "{root}")
import danaus
from tests.multihost.test_workers import Where
danaus.configure(transport="tcp", heartbeat_interval=0.3, heartbeat_timeout=3.0)
hosts = danaus.attach_to_workers(workers=["{address}"])
pids = hosts.spawn_procs(per_host={{"gpus": 2}}).spawn("w", Where).pid.call().get(timeout=60)
print(*pids.values(), flush=True)
import time
time.sleep(600)
"""

AGAIN = """
import sys
sys.path.insert(0, "{root}")
import danaus
from tests.multihost.test_workers import Where
hosts = danaus.attach_to_workers(workers=["{address}"], timeout=30)
print(len(hosts.spawn_procs(per_host={{"gpus": 2}}).spawn("w", Where).pid.call().get(timeout=60)))
"""


def test_once_exits_when_its_controller_is_done(workers, controller):
    worker = workers(None, "--once")
    controller()
    hosts = danaus.attach_to_workers(workers=[worker.address], key=worker.key)
    hosts.spawn_procs(per_host={"gpus": 2}).initialized.get(timeout=60)
    tree = worker.group()
    hosts.stop().get(timeout=60)
    assert worker.process.wait(30) == 0
    wait_until(lambda: not any(map(alive, tree)), 30, "the worker's processes to end")


def test_output_of_procs_on_another_host_names_the_host(workers, tmp_path):
    worker = workers(None, "--name", "far")
    result = run_script(
        SHOUT.format(address=worker.address, root=ROOT), tmp_path, DANAUS_JOB_KEY=worker.key
    )
    assert result.returncode == 0, result.stderr
    assert "[far shouters hosts=0 gpus=1] hello from afar" in result.stdout
    assert "[far shouters hosts=0 gpus=0] hello from afar" in result.stdout


SHOUT = """
import sys
sys.path.insert(0, "{root}")
import danaus
from tests.multihost.test_workers import Where
hosts = danaus.attach_to_workers(workers=["{address}"])
shouters = hosts.spawn_procs(per_host={{"gpus": 2}}).spawn("shouters", Where)
shouters.shout.call("hello from afar").get(timeout=60)
"""


def test_workers_refuse_every_interface_and_keys_others_can_read(tmp_path):
    def worker(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
        clean = {k: v for k, v in os.environ.items() if not k.startswith("DANAUS_JOB_KEY")}
        return subprocess.run(
            [sys.executable, "-m", "danaus.cli", "worker", *args],
            cwd=ROOT,
            env={**clean, **env},
            capture_output=True,
            text=True,
            timeout=60,
        )

    key = danaus.make_job_key()
    wildcard = worker("--listen", "0.0.0.0:0", DANAUS_JOB_KEY=key)
    assert wildcard.returncode != 0 and "every interface" in wildcard.stderr
    assert "no job key" in worker("--listen", "127.0.0.1:0").stderr
    key_file = tmp_path / "job.key"
    danaus.make_job_key(key_file)
    assert key_file.stat().st_mode & 0o777 == 0o600
    key_file.chmod(0o640)
    readable = worker("--listen", "127.0.0.1:0", "--key-file", str(key_file))
    assert "chmod 600" in readable.stderr
    assert "not 3 characters" in worker("--listen", "127.0.0.1:0", DANAUS_JOB_KEY="abc").stderr


def test_a_loopback_controller_refuses_workers_it_cannot_be_reached_from(controller):
    controller()
    with pytest.raises(ValueError, match="bind_host"):
        danaus.attach_to_workers(workers=["192.0.2.7:26600"], key=danaus.make_job_key())


def test_attach_checks_its_arguments(controller):
    controller()
    key = danaus.make_job_key()
    with pytest.raises(TypeError, match="list of addresses"):
        danaus.attach_to_workers(workers="127.0.0.1:1", key=key)
    with pytest.raises(ValueError, match="at least one"):
        danaus.attach_to_workers(workers=[], key=key)
    with pytest.raises(ValueError, match="named twice"):
        danaus.attach_to_workers(workers=["127.0.0.1:1", "127.0.0.1:1"], key=key)
    with pytest.raises(ValueError, match="bad port"):
        danaus.attach_to_workers(workers=["127.0.0.1:http"], key=key)
    with pytest.raises(ValueError, match="key"):
        danaus.attach_to_workers(workers=["127.0.0.1:1"], key="short")


def test_an_unreachable_worker_is_a_lost_host_with_the_reason(controller):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    controller()
    failures, failed = danaus.Channel.open()
    danaus.unhandled_fault_hook = failures.send
    hosts = danaus.attach_to_workers(
        workers=[f"127.0.0.1:{port}"], key=danaus.make_job_key(), timeout=1
    )
    procs = hosts.spawn_procs(per_host={"gpus": 2})
    actors = procs.spawn("w", Where)
    # Refused at once, as a rule; on a loaded machine the attach timeout may end first.
    reason = r"(could not connect \(Connection refused|no answer from the worker).*running there"
    with pytest.raises(SupervisionError, match=reason):
        actors.pid.call().get(timeout=60)
    with pytest.raises(SupervisionError):
        procs.initialized.get(timeout=60)
    reports = [failed.recv().get(timeout=60) for _ in range(2)]
    assert sorted(r.rank["gpus"] for r in reports) == [0, 1]
    for report in reports:
        assert report.host == f"tcp://127.0.0.1:{port}"
        assert "was lost with its host" in report.cause


def test_the_key_can_come_from_a_file(workers, controller, tmp_path, monkeypatch):
    key_file = tmp_path / "job.key"
    danaus.make_job_key(key_file)
    worker = workers(None, "--key-file", str(key_file), env={"DANAUS_JOB_KEY": ""})
    controller()
    monkeypatch.setenv("DANAUS_JOB_KEY_FILE", str(key_file))
    danaus.attach_to_workers(workers=[worker.address]).initialized.get(timeout=60)


def kill_tree(worker: Worker) -> None:
    """Kill the worker and everything under it at once, as if its machine died."""
    for pid in [worker.process.pid, *worker.group()]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@pytest.fixture(params=["tcp", "ucx"])
def transport(request: pytest.FixtureRequest) -> str:
    if request.param == "ucx" and importlib.util.find_spec("ucxx") is None:
        pytest.skip("the ucx transport needs the ucxx package")
    return request.param


@pytest.mark.parametrize("when", ["before", "during"])
def test_a_shutdown_skips_a_host_lost_before_or_during_it_and_ends_the_others(
    workers, controller, transport, when, caplog
):
    """The lost host's worker is gone with it: nothing waits for it to confirm its release."""
    key = danaus.make_job_key()
    three = [workers(key) for _ in range(3)]
    controller(transport)
    hosts = danaus.attach_to_workers(workers=[w.address for w in three], key=key)
    outcome = stop_losing_a_host(hosts, hosts.shutdown, lambda: kill_tree(three[VICTIM]), when)
    assert outcome.lost == LOST
    assert len(outcome.failures) == (2 if when == "before" else 0)
    for survivor in (three[0], three[2]):
        assert survivor.process.wait(30) == 0, survivor.output()
        assert not survivor.group()
    victim = placement_of(hosts).procs[VICTIM]
    assert f"{victim} did not confirm its release" not in caplog.text


def test_a_stop_skips_a_lost_host_and_the_controllers_exit_leaves_the_others_waiting(
    workers, controller
):
    key = danaus.make_job_key()
    three = [workers(key) for _ in range(3)]
    controller()
    hosts = danaus.attach_to_workers(workers=[w.address for w in three], key=key)
    outcome = stop_losing_a_host(hosts, hosts.stop, lambda: kill_tree(three[VICTIM]), "before")
    assert outcome.lost == LOST
    danaus.shutdown()
    survivors = [three[0], three[2]]
    assert all(s.process.poll() is None for s in survivors), "a stopped host's worker waits"
    danaus.configure(transport="tcp", **FAST)
    again = danaus.attach_to_workers(workers=[s.address for s in survivors], key=key)
    again.spawn_procs().initialized.get(timeout=60)


class Tidy(Actor):
    """Leaves a file named after its rank in ``folder`` when it cleans up."""

    def __init__(self, folder: str) -> None:
        self.mark = Path(folder) / "-".join(f"{k}{v}" for k, v in current_rank().items())

    @endpoint
    def pid(self) -> int:
        return os.getpid()

    def __cleanup__(self, exc: BaseException | None) -> None:
        self.mark.touch()


def test_the_controllers_exit_after_a_lost_host_stops_every_mesh_and_leaves_workers_waiting(
    workers, controller, tmp_path
):
    """The exit stops the newest mesh, which lost a host, then the older one, all of it."""
    key = danaus.make_job_key()
    three = [workers(key) for _ in range(3)]
    controller()
    failures: list[danaus.MeshFailure] = []
    danaus.unhandled_fault_hook = failures.append
    hosts = danaus.attach_to_workers(workers=[w.address for w in three], key=key)
    (tmp_path / "n").mkdir()
    older = hosts.slice(hosts=slice(0, 3, 2)).spawn_procs().spawn("older", Tidy, str(tmp_path))
    newer = hosts.spawn_procs(per_host={"gpus": 2}).spawn("newer", Tidy, str(tmp_path / "n"))
    pids = [*older.pid.call().get(timeout=60).values(), *newer.pid.call().get(timeout=60).values()]
    kill_tree(three[VICTIM])
    wait_until(lambda: len(failures) == 2, 60, "the loss of the host's two procs")
    danaus.shutdown()
    assert sorted(p.name for p in tmp_path.glob("hosts*")) == ["hosts0", "hosts1"]
    cleaned = sorted(p.name for p in (tmp_path / "n").iterdir())
    assert cleaned == ["hosts0-gpus0", "hosts0-gpus1", "hosts2-gpus0", "hosts2-gpus1"]
    wait_until(lambda: not any(map(alive, pids)), 30, "every proc of the job to end")
    for survivor in (three[0], three[2]):
        assert survivor.process.poll() is None, "the worker waits for another controller"


def serve_as_worker(ca: str, address_file: Path, environment: dict[str, str]) -> subprocess.Popen:
    """A worker started as Monarch programs start theirs: ``run_worker_loop_forever(ca=...)``."""
    code = (
        "from danaus import run_worker_loop_forever; "
        f"run_worker_loop_forever(address='tcp://127.0.0.1:0', ca={ca!r}, "
        f"address_file={str(address_file)!r}, exit_on_disconnect=True)"
    )
    return subprocess.Popen(
        [sys.executable, "-c", code], cwd=ROOT, env=environment, start_new_session=True
    )


def test_trust_all_connections_is_the_key_of_the_user_who_runs_both(
    controller, tmp_path, monkeypatch
):
    """Monarch's ``ca="trust_all_connections"``, with no key in the environment: a worker and
    a controller of one user share the user's own key (made once, private), and a
    controller of another key is refused."""
    config = tmp_path / "config"
    environment = {k: v for k, v in os.environ.items() if not k.startswith("DANAUS_JOB_KEY")}
    environment["XDG_CONFIG_HOME"] = str(config)
    for name in ("DANAUS_JOB_KEY", "DANAUS_JOB_KEY_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(config))
    address_file = tmp_path / "address"
    worker = serve_as_worker("trust_all_connections", address_file, environment)
    try:
        wait_until(address_file.exists, 60, "the worker to listen")
        address = address_file.read_text().strip()
        controller()
        stranger = danaus.attach_to_workers(workers=[address], key=danaus.make_job_key())
        with pytest.raises(SupervisionError):
            stranger.initialized.get(timeout=60)
        hosts = danaus.attach_to_workers(ca="trust_all_connections", workers=[address])
        procs = hosts.spawn_procs(per_host={"gpus": 2})
        assert len(procs.spawn("w", Where).pid.call().get(timeout=60)) == 2
        hosts.shutdown().get(timeout=60)
        assert worker.wait(30) == 0
    finally:
        worker.kill()
        worker.wait(30)
    key_file = config / "danaus" / "job-key"
    assert key_file.stat().st_mode & 0o777 == 0o600


def test_ca_takes_the_jobs_key_and_is_checked(workers, controller, tmp_path):
    key_file = tmp_path / "job.key"
    key = danaus.make_job_key(key_file)
    worker = workers(key)
    controller()
    danaus.attach_to_workers(ca=key.encode(), workers=[worker.address]).initialized.get(timeout=60)
    danaus.shutdown()
    controller()
    danaus.attach_to_workers(ca=key_file, workers=[worker.address]).initialized.get(timeout=60)
    with pytest.raises(TypeError, match="not both"):
        danaus.attach_to_workers(ca=key_file, key=key, workers=[worker.address])
    with pytest.raises(ValueError, match="trust_all_connections"):
        danaus.attach_to_workers(ca="trust_some", workers=[worker.address])
