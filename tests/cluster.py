"""A cluster of hosts on one machine: network namespaces on a private subnet, a worker in each.

Each host is a network namespace with one interface, ``eth0``, plugged into a
bridge that lives in a namespace of its own (the switch); the controller, in
the root namespace, is plugged into the same bridge. So the hosts reach each
other and the controller over their own links only, and a host's link can be
cut (its switch port set down) without touching anything else. Each switch
port can also drop, silently, the packets that come in from its machine for
chosen addresses (a ``tc`` filter on the port's ingress that redirects them to
``sink``, an interface that is down): `NamespaceControl` partitions, isolates
and crashes hosts with these. Traffic goes only to namespaces made here.
Names carry the creating process's id, so the leftovers of a run that was
killed are removed by the next one.

Needs root and the ``ip`` and ``tc`` commands; `unavailable` says why when they are missing.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import itertools
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from danaus.chaos import FaultUnsupported, Heal, HostControl

PREFIX = "danaus-"
LOCK = Path("/tmp/danaus-netns.lock")
WORKER_PORT = 26600
CLUSTER_SIZE = 3
PR_SET_PDEATHSIG = 1
CRASH_TIMEOUT = 10.0
"""Seconds the processes of a crashed host may take to die of SIGKILL."""
SINK = "sink0"
"""The switch's interface that is down: where the packets of a cut go, to be dropped."""


def unavailable() -> str | None:
    """Why namespace clusters cannot be made here, or None."""
    if sys.platform != "linux":
        return "network namespaces need Linux"
    if os.geteuid() != 0:
        return "network namespaces need root"
    for command in ("ip", "tc"):
        if shutil.which(command) is None:
            return f"network namespaces need the {command} command (iproute2)"
    return None


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], check=check, capture_output=True, text=True)


def tc(namespace: str, *args: str) -> subprocess.CompletedProcess[str]:
    command = ["tc", "-n", namespace, *args]
    return subprocess.run(command, check=True, capture_output=True, text=True)


def _die_with_us() -> None:
    ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def remove_leftovers() -> None:
    """Delete the namespaces of runs whose process is gone."""
    for line in ip("netns", "list").stdout.splitlines():
        name = line.split()[0]
        found = re.fullmatch(rf"{PREFIX}(\d+)-\w+", name)
        if found and not Path(f"/proc/{found.group(1)}").exists():
            ip("netns", "delete", name, check=False)


def _free_subnet() -> int:
    """An ``N`` such that 10.N.0.0/24 is not routed here yet."""
    routes = ip("-4", "route", "show").stdout
    for n in range(100 + os.getpid() % 100, 250):
        if f"10.{n}." not in routes:
            return n
    raise RuntimeError("no free 10.N.0.0/24 subnet for a namespace cluster")


@dataclass
class Host:
    """One host of the cluster: its namespace, address and worker process."""

    name: str
    namespace: str
    address: str
    port: str
    worker: subprocess.Popen[str] | None = None
    log: list[str] = field(default_factory=list)

    @property
    def worker_address(self) -> str:
        return f"tcp://{self.address}:{WORKER_PORT}"


class Cluster:
    """``size`` hosts and the controller's interface, on subnet 10.N.0.0/24."""

    def __init__(self, size: int, key: str) -> None:
        self.size = size
        self.key = key
        self.tag = f"{PREFIX}{os.getpid()}"
        self.switch = f"{self.tag}-sw"
        self.hosts: list[Host] = []
        self.controller_address = ""
        self._root_link = f"dn{os.getpid()}r"
        self._made: list[str] = []

    # ---- making and removing ----------------------------------------------------------

    def create(self) -> None:
        LOCK.touch(exist_ok=True)
        with open(LOCK) as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            remove_leftovers()
            subnet = _free_subnet()
            self._namespace(self.switch)
            ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
            ip("-n", self.switch, "link", "set", "br0", "up")
            ip("-n", self.switch, "link", "add", SINK, "type", "veth", "peer", "name", "sink1")
            self.controller_address = f"10.{subnet}.0.1"
            ip("link", "add", self._root_link, "type", "veth", "peer", "name", "c0")
            ip("link", "set", "c0", "netns", self.switch)
            ip("addr", "add", f"{self.controller_address}/24", "dev", self._root_link)
            ip("link", "set", self._root_link, "up")
            self._plug("c0")
            for index in range(1, self.size + 1):
                self.hosts.append(self._host(index, subnet))

    def _namespace(self, name: str) -> None:
        ip("netns", "add", name)
        self._made.append(name)
        ip("-n", name, "link", "set", "lo", "up")

    def _plug(self, port: str) -> None:
        ip("-n", self.switch, "link", "set", port, "master", "br0")
        ip("-n", self.switch, "link", "set", port, "up")
        tc(self.switch, "qdisc", "add", "dev", port, "ingress")

    def _host(self, index: int, subnet: int) -> Host:
        namespace = f"{self.tag}-h{index}"
        self._namespace(namespace)
        port = f"h{index}"
        ip("-n", self.switch, "link", "add", port, "type", "veth", "peer", "name", "eth0")
        ip("-n", self.switch, "link", "set", "eth0", "netns", namespace)
        address = f"10.{subnet}.0.{index + 1}"
        ip("-n", namespace, "addr", "add", f"{address}/24", "dev", "eth0")
        ip("-n", namespace, "link", "set", "eth0", "up")
        self._plug(port)
        return Host(f"host{index}", namespace, address, port)

    def destroy(self) -> None:
        """Stop every worker and remove every namespace (also after failures)."""
        for host in self.hosts:
            self.stop_worker(host)
        for name in reversed(self._made):
            ip("netns", "delete", name, check=False)
        self._made.clear()
        ip("link", "delete", self._root_link, check=False)

    # ---- workers ----------------------------------------------------------------------

    def environment(self) -> dict[str, str]:
        """A worker's environment: this one's, without what names this host's devices."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("UCX_NET", "DANAUS_"))}
        env["DANAUS_JOB_KEY"] = self.key
        env.setdefault("PYTHONPATH", str(Path(__file__).resolve().parents[1]))
        return env

    def start_worker(self, host: Host, timeout: float = 60) -> None:
        """Start ``danaus worker`` in ``host``'s namespace; return once it listens."""
        command = [
            "ip", "netns", "exec", host.namespace,
            sys.executable, "-m", "danaus.cli", "worker",
            "--listen", f"{host.address}:{WORKER_PORT}", "--name", host.name,
        ]  # fmt: skip
        host.log = []
        host.worker = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=self.environment(),
            preexec_fn=_die_with_us,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        assert host.worker.stdout is not None
        while time.monotonic() < deadline:
            line = host.worker.stdout.readline()
            if not line:
                break
            host.log.append(line)
            if "listening on" in line:
                os.set_blocking(host.worker.stdout.fileno(), False)
                return
        raise RuntimeError(f"the worker of {host.name} did not start:\n{''.join(host.log)}")

    def worker_output(self, host: Host) -> str:
        """What ``host``'s worker has printed so far."""
        if host.worker is not None and host.worker.stdout is not None:
            with contextlib.suppress(TypeError, OSError):
                host.log.extend(host.worker.stdout.readlines())
        return "".join(host.log)

    def stop_worker(self, host: Host, sig: int = signal.SIGKILL) -> None:
        """End ``host``'s worker and everything it started."""
        worker, host.worker = host.worker, None
        if worker is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(worker.pid, sig)
        worker.wait(10)
        for pid in self.pids_in(host):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def pids_in(self, host: Host) -> list[int]:
        """The processes running in ``host``'s namespace."""
        found = ip("netns", "pids", host.namespace, check=False).stdout.split()
        return [int(pid) for pid in found]

    def job_pids(self, host: Host) -> list[int]:
        """The processes in ``host``'s namespace but its worker, the agent it keeps ready and
        that agent's fork server."""
        worker = host.worker.pid if host.worker is not None else None
        processes = {}
        for pid in self.pids_in(host):
            try:
                parent = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
                processes[pid] = (parent, Path(f"/proc/{pid}/cmdline").read_bytes())
            except (OSError, IndexError):
                continue
        ready = {
            pid
            for pid, (parent, command) in processes.items()
            if parent == worker and b"--preload" in command
        }
        return [
            pid
            for pid, (parent, command) in processes.items()
            if pid != worker
            and pid not in ready
            and not (parent in ready and b"danaus.transports.tcp.forker" in command)
        ]

    def clean(self, host: Host) -> bool:
        """Whether ``host`` runs its worker and nothing of any job."""
        return host.worker is not None and not self.job_pids(host)

    # ---- controllers ------------------------------------------------------------------

    def workers(self, first: int = 0, count: int | None = None) -> list[str]:
        """``count`` workers' addresses (all), from host ``first`` on (the controller's own)."""
        addresses = [host.worker_address for host in self.hosts]
        first %= len(addresses)
        return (addresses[first:] + addresses[:first])[:count]

    def controller_options(self, first: int = 0, count: int | None = None) -> dict[str, object]:
        """``configure()`` options of a controller whose job runs on ``count`` of these hosts."""
        return {
            "workers": self.workers(first, count),
            "bind_host": self.controller_address,
            "job_key": self.key,
        }

    def controller_environment(self, first: int = 0, count: int | None = None) -> dict[str, str]:
        """The same, as the environment of a controller process."""
        return {
            "DANAUS_WORKERS": ",".join(self.workers(first, count)),
            "DANAUS_BIND_HOST": self.controller_address,
            "DANAUS_JOB_KEY": self.key,
        }

    # ---- faults -----------------------------------------------------------------------

    def link(self, host: Host, up: bool) -> None:
        """Plug ``host``'s cable back in, or pull it out."""
        ip("-n", self.switch, "link", "set", host.port, "up" if up else "down")

    def port_of(self, address: str) -> str:
        """The switch port of the machine at ``address`` (a host, or the controller)."""
        if address == self.controller_address:
            return "c0"
        return self.host_at(address).port

    def host_at(self, address: str) -> Host:
        for host in self.hosts:
            if host.address == address:
                return host
        raise FaultUnsupported(f"no host of this cluster has the address {address}")


class NamespaceControl(HostControl):
    """Power over a namespace cluster's machines, on its switch; `restore` undoes everything.

    A cut is a filter on the sending machine's switch port that drops what it
    sends to the other address (as a broken network would: nothing tells the
    sender). A crash pulls the host's cable out, then kills the job's
    processes on it (its worker stays, as a worker restarted at boot would):
    no packet says goodbye, so the controller learns of it only by heartbeats.
    """

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self._filters: dict[int, str] = {}
        self._numbers = itertools.count(1)
        self._crashed: list[Host] = []
        self._lock = threading.Lock()

    def cut(self, src: str, dst: str) -> Heal:
        port = self.cluster.port_of(src)
        self.cluster.port_of(dst)  # refuses an address that is not the cluster's
        with self._lock:
            number = next(self._numbers)
            tc(
                self.cluster.switch, "filter", "add", "dev", port, "parent", "ffff:",
                "protocol", "ip", "pref", str(number), "u32", "match", "ip", "dst", f"{dst}/32",
                "action", "mirred", "egress", "redirect", "dev", SINK,
            )  # fmt: skip
            self._filters[number] = port
        return partial(self._uncut, number)

    def _uncut(self, number: int) -> None:
        with self._lock:
            port = self._filters.pop(number, None)
            if port is not None:
                tc(self.cluster.switch, "filter", "del", "dev", port, "parent", "ffff:",
                   "pref", str(number))  # fmt: skip

    def crash(self, address: str) -> None:
        host = self.cluster.host_at(address)
        with self._lock:
            self._crashed.append(host)
        self.cluster.link(host, up=False)
        deadline = time.monotonic() + CRASH_TIMEOUT
        while pids := self.cluster.job_pids(host):
            if time.monotonic() > deadline:
                raise RuntimeError(f"processes {pids} of {host.name} outlived SIGKILL")
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.01)

    def cuts(self) -> int:
        """How many cuts are in place."""
        return len(self._filters)

    def restore(self) -> None:
        """Remove every cut and plug every crashed host back in."""
        for number in list(self._filters):
            self._uncut(number)
        with self._lock:
            crashed, self._crashed = self._crashed, []
        for host in crashed:
            self.cluster.link(host, up=True)


@contextlib.contextmanager
def cluster(size: int, key: str) -> Iterator[Cluster]:
    """A cluster of ``size`` hosts with a worker each, removed on exit whatever happened."""
    made = Cluster(size, key)
    try:
        made.create()
        for host in made.hosts:
            made.start_worker(host)
        yield made
    finally:
        made.destroy()
