"""A real process's world on the tcp transport.

Threads of a controller process: the user's (main code), the runtime loop
(``danaus-runtime``: actors' async code, routing, ports), the I/O thread
(``danaus-io``: sockets, directory, heartbeats, child processes, links to
attached workers) and one thread per actor with sync endpoints. A worker
process is the same, except that its main thread runs the runtime loop.

A worker process is a proc, or the host agent that a worker loop on another
host started for this controller (`danaus.transports.tcp.worker_loop`): that
one starts procs on its host, reports them to the controller's directory and
forwards their output (`danaus.transports.tcp.remote`), and ends them all when
it ends.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import inspect
import ipaddress
import logging
import os
import random
import socket
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import msgspec
import zmq

from danaus import tracing
from danaus.core import awake, config, home_cpu, last_words
from danaus.core.attach import ATTACH_TIMEOUT
from danaus.core.blocking import ActorThread, cancel_leftover_tasks
from danaus.core.bootstrap import BootstrapCommand
from danaus.core.casting import DEFAULT_FANOUT
from danaus.core.faults import HostControl
from danaus.core.owned import STOP_TIMEOUT
from danaus.core.runtime import Runtime
from danaus.core.serialize import loads
from danaus.core.trace import Trace
from danaus.core.transport import ActorRunner, World
from danaus.debug import hook
from danaus.transports.tcp import control, hostlink, jobkey
from danaus.transports.tcp.bootstrap import Bootstrap, search_path
from danaus.transports.tcp.directory import Directory
from danaus.transports.tcp.faults import SignalFaults
from danaus.transports.tcp.forkserver import POOL, preload_from
from danaus.transports.tcp.ioloop import IoLoop, settler
from danaus.transports.tcp.launcher import STDOUT, LocalLauncher, Registry, default_command
from danaus.transports.tcp.limits import Limits
from danaus.transports.tcp.refusals import RefusalLog
from danaus.transports.tcp.remote import RemoteRegistry, forward_output
from danaus.transports.tcp.security import JobKeys, ZapHandler
from danaus.transports.tcp.streams import STOP_LINGER
from danaus.transports.tcp.transport import ROOT, TcpTransport

if TYPE_CHECKING:
    from danaus.admin.service import AdminService
    from danaus.transports.tcp.admin import AdminSocket
    from danaus.transports.tcp.attacher import Attacher

log = logging.getLogger("danaus.tcp")

T = TypeVar("T")

HEARTBEAT_INTERVAL = 0.5
HEARTBEAT_TIMEOUT = 3.0
BIND_HOST = "127.0.0.1"
"""Jobs on one host listen on loopback only."""
ADMIN_HOST = "127.0.0.1"
"""The admin socket (`danaus top`, `danaus debug`) listens on loopback unless configured."""
TRACE_TIMEOUT = 5.0
"""How long a controller writing its trace at shutdown waits for each proc's events."""
BIND_HOST_ENV = "DANAUS_BIND_HOST"
"""Names the address a controller listens on when ``configure`` does not."""
WORKERS_ENV = "DANAUS_WORKERS"
"""The job's workers (comma-separated addresses) when ``configure`` names none."""
RELEASE_TIMEOUT = 3.0
"""Seconds a worker may take to confirm that it ended the host agent of a released host."""


def bind_host_from(option: str | None) -> str:
    """The address to listen on: the option, else ``DANAUS_BIND_HOST``, else loopback."""
    return option or os.environ.get(BIND_HOST_ENV) or BIND_HOST


def workers_from(option: Sequence[str] | None) -> list[str]:
    """The job's workers: the option, else ``DANAUS_WORKERS``, else none."""
    if option is not None:
        if isinstance(option, str):
            raise TypeError("workers must be a list of addresses, not one string")
        return list(option)
    return [w.strip() for w in os.environ.get(WORKERS_ENV, "").split(",") if w.strip()]


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class TcpWorld(World):
    """One OS process's procs (exactly one) on the tcp transport."""

    name = "tcp"
    transport_class: type[TcpTransport] = TcpTransport

    def __init__(
        self,
        *,
        proc_id: str,
        host: str,
        host_agent: str,
        keys: JobKeys,
        heartbeat_interval: float,
        heartbeat_timeout: float,
        bind_host: str,
        limits: Limits,
        controller_address: str | None = None,
        trace: bool = False,
        job_hosts: Sequence[str] = (),
        remote: bool = False,
        host_control: HostControl | None = None,
    ) -> None:
        self.proc_id = proc_id
        self.host = host
        self.host_agent = host_agent
        self.keys = keys
        self.bind_host = bind_host
        self.heartbeat_interval = heartbeat_interval
        self.heartbeat_timeout = heartbeat_timeout
        self.trace = Trace(time.monotonic, enabled=trace)
        self.random = random.Random()
        self.limits = limits
        self.max_procs_per_host = limits.max_procs_per_host
        self.max_message_bytes = limits.max_message_bytes
        self.job_hosts = list(job_hosts)
        """The host agents of the job's hosts (``danaus.hosts()``), if it names workers."""
        self.remote = remote
        """Whether the procs this process launches run on another host than the controller."""
        self.preload: tuple[str, ...] = ()
        """What the fork server of this process's launcher imports too (the job's ``preload``)."""
        self.home_cpus = True
        """Whether the procs this process launches get home CPUs (the job's ``home_cpus``)."""
        self.home_cpu: int | None = None
        """This proc's home CPU (`danaus.core.home_cpu`), or None: its threads go anywhere."""
        self.wait_spin_us = awake.WAIT_SPIN_US
        """How long this proc's threads poll before they sleep (the job's ``wait_spin_us``)."""
        self.io = IoLoop(f"danaus-io-{proc_id}")
        self.context = zmq.Context()
        """The control plane's: its zmq I/O thread, and its ZAP handler."""
        self.loop = asyncio.SelectorEventLoop(awake.AwakeSelector())
        self.zap = ZapHandler(self.context, self.io, keys)
        self.transport = self.transport_class(
            proc_id,
            host,
            self.io,
            self.context,
            keys,
            self.loop,
            bind_host=bind_host,
            limits=limits,
            refusals=RefusalLog(self.io.call_later_threadsafe),
            controller_address=controller_address,
        )
        self.controller_address = controller_address or self.transport.address.control
        self.launcher = LocalLauncher(self)
        self.faults = SignalFaults(self, host_control)
        self.host_addresses: dict[str, str] = {}
        """The address of each attached host's worker, by host agent (the controller only)."""
        self.directory: Directory = None  # type: ignore[assignment]
        self.registry: Registry = None  # type: ignore[assignment]
        """Where the launcher registers its children: the directory, or the controller's."""
        self.output: Callable[[int, str], None] = _write_output
        """Where the launcher's children's output goes (stream 1 or 2, text)."""
        self.attacher: Attacher | None = None
        self._runtime: Runtime | None = None
        self._loop_thread: threading.Thread | None = None
        self._closed = False
        self._silence = 0.0
        """Seconds this proc's I/O thread has been awake since the controller's last heartbeat."""
        self._last_check = 0.0
        """When `_check_controller` last ran (``time.monotonic``)."""
        self.admin: AdminService | None = None
        """What `danaus top` and `danaus debug` ask (the controller only)."""
        self.admin_socket: AdminSocket | None = None
        self.trace_files: list[str] = []
        """Where the controller writes the job's trace when it shuts down."""
        hook.install()
        self._setup: list[bytes] | None = None

    # ---- making worlds ----------------------------------------------------------------

    @classmethod
    def controller(
        cls,
        heartbeat_interval: float = HEARTBEAT_INTERVAL,
        heartbeat_timeout: float = HEARTBEAT_TIMEOUT,
        bind_host: str | None = None,
        trace: bool | str | None = None,
        encrypt: bool = True,
        admin: bool = True,
        admin_host: str = ADMIN_HOST,
        workers: Sequence[str] | None = None,
        job_key: Any = None,
        host_control: HostControl | None = None,
        cast_fanout: int = DEFAULT_FANOUT,
        preload: Sequence[str] | None = None,
        home_cpus: bool = True,
        wait_spin_us: int = awake.WAIT_SPIN_US,
        **limits: float | None,
    ) -> TcpWorld:
        """The controller's world: the root proc, the directory, and this host's agent.

        ``trace``: True records the job's events, a path also writes them there
        at shutdown (`danaus.tracing`). ``admin``: serve `danaus top` and
        `danaus debug` on ``admin_host``. With ``workers`` (or
        ``DANAUS_WORKERS``), it attaches to them at once: they are the job's
        hosts (``hosts()``), and ``this_host()`` in the controller is the first
        of them. ``host_control`` gives chaos runs power over the workers'
        machines (`danaus.transports.tcp.faults`). ``cast_fanout`` is the job's
        (`danaus.core.casting`), handed to every proc. ``preload`` names modules
        the fork servers that start the job's procs import before they fork
        (None: ``DANAUS_PRELOAD``; `danaus.transports.tcp.forkserver`).
        ``home_cpus``: each proc's runtime loop thread stays on a CPU of its own
        while there are CPUs left, and the proc's threads wait there
        (`danaus.core.home_cpu`); ``wait_spin_us``: how long each proc's threads poll
        for what they wait for before they sleep (`danaus.core.awake`). ``limits``
        are the options of `Limits.from_options`.
        """
        workers = workers_from(workers)
        if not workers:
            POOL.ahead(cls.name, preload_from(preload))
        # What only a controller runs is imported here, off a worker's start-up.
        from danaus.admin.service import AdminService
        from danaus.transports.tcp.admin import AdminSocket
        from danaus.transports.tcp.attacher import Attacher

        trace_files = tracing.destinations(trace)
        bind_host = bind_host_from(bind_host)
        plan = attach_plan(workers, job_key, bind_host) if workers else None
        job_hosts = [f"hosts.{i}" for i in range(len(workers))]
        world = cls(
            proc_id=ROOT,
            host=socket.gethostname(),
            host_agent=job_hosts[0] if job_hosts else ROOT,
            keys=JobKeys.generate(encrypt),
            heartbeat_interval=heartbeat_interval,
            heartbeat_timeout=heartbeat_timeout,
            bind_host=bind_host,
            limits=Limits.from_options(**limits),
            trace=bool(trace) or bool(trace_files),
            job_hosts=job_hosts,
            host_control=host_control,
        )
        world.cast_fanout = cast_fanout
        world.preload = preload_from(preload)
        world.home_cpus = home_cpus
        world.home_cpu = home_cpu.home_for(0) if home_cpus else None
        world.wait_spin_us = wait_spin_us
        world.trace_files = trace_files
        if admin:
            world.admin_socket = AdminSocket(world, admin_host)
        world.directory = Directory(
            world.transport.send_control,
            world.io,
            heartbeat_interval=heartbeat_interval,
            heartbeat_timeout=heartbeat_timeout,
            kill=world.launcher.kill,
            process_state=world.launcher.process_state,
        )
        world.registry = world.directory
        world.transport.directory = world.directory
        world.transport.on_control = world._controller_control
        world.attacher = Attacher(world.context, world.io, world.directory)
        world.directory.register_local(ROOT, world.transport.address, os.getpid(), world.host)
        last_words.install()
        world.io.start()
        world._loop_thread = threading.Thread(
            target=world._run_loop, name="danaus-runtime", daemon=True
        )
        world._loop_thread.start()
        if plan is not None:
            world._attach(plan, job_hosts, ATTACH_TIMEOUT)
        world._runtime = world._on_loop(lambda: world._make_runtime(host_agent=True))
        world.admin = AdminService(world)
        world.output = world.admin.logs.tee(world.output)
        if world.admin_socket is not None:
            world.admin_socket.publish()
        return world

    @classmethod
    def worker(cls, boot: Bootstrap) -> TcpWorld:
        """A worker's world, from the bootstrap its launcher wrote to its stdin."""
        world = cls(
            proc_id=boot.proc_id,
            host=boot.host,
            host_agent=boot.host_agent,
            keys=JobKeys(boot.public_key, boot.secret_key, boot.encrypt),
            heartbeat_interval=boot.heartbeat_interval,
            heartbeat_timeout=boot.heartbeat_timeout,
            controller_address=boot.controller,
            trace=boot.trace,
            bind_host=boot.bind_host,
            limits=Limits(**boot.limits),
            job_hosts=boot.hosts,
            remote=boot.is_host_agent,
        )
        world._setup = boot.setup
        world.cast_fanout = boot.cast_fanout
        world.preload = tuple(boot.preload)
        world.home_cpus = boot.home_cpus
        world.home_cpu = boot.home_cpu
        world.wait_spin_us = boot.wait_spin_us
        world.transport.on_control = world._worker_control
        if boot.is_host_agent:
            world.registry = RemoteRegistry(world.transport)
            world.output = forward_output(world.transport)
        world.io.start()
        return world

    def bootstrap(self, proc_id: str, name: str, host: str, **fields: Any) -> Bootstrap:
        """What a proc this process starts is told (``fields`` override the rest)."""
        return Bootstrap(
            **{
                "proc_id": proc_id,
                "name": name,
                "host": host,
                "host_agent": self.proc_id,
                "controller": self.controller_address,
                "public_key": self.keys.public,
                "secret_key": self.keys.secret,
                "heartbeat_interval": self.heartbeat_interval,
                "heartbeat_timeout": self.heartbeat_timeout,
                "parent_pid": os.getpid(),
                "sys_path": search_path(),
                "cwd": os.getcwd(),
                "trace": self.trace.enabled,
                "bind_host": self.bind_host,
                "transport": self.name,
                "encrypt": self.keys.encrypt,
                "limits": msgspec.structs.asdict(self.limits),
                "hosts": list(self.job_hosts),
                "remote": self.remote,
                "cast_fanout": self.cast_fanout,
                "preload": list(self.preload),
                "home_cpus": self.home_cpus,
                "wait_spin_us": self.wait_spin_us,
                **fields,
            }
        )

    def _make_runtime(self, host_agent: bool) -> Runtime:
        runtime = Runtime(
            self, self.proc_id, self.host, self.host_agent, self.transport, pid=os.getpid()
        )
        runtime.start(host_agent)
        return runtime

    def _run_loop(self) -> None:
        asyncio.set_event_loop(self.loop)
        self._settle()
        try:
            self.loop.run_forever()
        finally:
            home_cpu.unsettle()
            awake.keep_awake(0)

    def _settle(self) -> None:
        """Pin this thread, the runtime loop's, to the proc's home CPU, if it has one;
        from now on, the proc's waits poll before they sleep (`danaus.core.awake`)."""
        if self.home_cpu is not None:
            home_cpu.settle(self.home_cpu)
        awake.keep_awake(self.wait_spin_us / 1e6)

    def _on_loop(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on the runtime loop's thread and wait for its result."""
        result: concurrent.futures.Future[T] = concurrent.futures.Future()

        def call() -> None:
            try:
                result.set_result(fn())
            except BaseException as exc:
                result.set_exception(exc)

        self.loop.call_soon_threadsafe(call)
        return result.result()

    # ---- the worker's life ------------------------------------------------------------

    def serve_forever(self) -> None:
        """Run this worker until its controller tells it to exit (or disappears)."""
        asyncio.set_event_loop(self.loop)
        self._run_setup()
        self._runtime = self._make_runtime(host_agent=self.host_agent == self.proc_id)
        self.io.call_soon(self._greet)
        self._settle()
        try:
            self.loop.run_forever()
        finally:
            self.loop.run_until_complete(self._close_runtime())
            self._stop_children()

    def _run_setup(self) -> None:
        """Run the ``spawn_procs(bootstrap=...)`` function, if any, before taking messages."""
        if self._setup is None:
            return
        result = loads(self._setup)()
        if inspect.isawaitable(result):
            self.loop.run_until_complete(result)

    def _worker_control(self, src: str, message: control.Control) -> None:
        if isinstance(message, control.Ping):
            self._silence = 0.0
            self.transport.send_control(ROOT, control.Pong(message.seq))
        elif isinstance(message, control.Exit):
            self.loop.call_soon_threadsafe(self.loop.stop)
        elif isinstance(message, control.Signal) and self.host_agent == self.proc_id:
            self.launcher.kill(message.proc, message.signal)
        elif isinstance(message, control.Check) and self.host_agent == self.proc_id:
            state = self.launcher.process_state(message.proc) or "halted"
            self.transport.send_control(ROOT, control.Running(message.proc, state))
        else:
            log.error("proc %s: unexpected %s from %s", self.proc_id, type(message).__name__, src)

    def _controller_control(self, src: str, message: control.Control) -> None:
        if isinstance(message, control.Output):
            self.output(message.stream, message.text)
        else:
            self.directory.handle(src, message)

    def _greet(self) -> None:
        """Register with the directory, and expect its heartbeats from now on (I/O thread):
        none came before, however long the proc took to start."""
        self._silence = 0.0
        self._last_check = time.monotonic()
        hello = control.Hello(self.transport.address, os.getpid(), self.host)
        self.transport.send_control(ROOT, hello)
        self.io.call_later(self.heartbeat_interval, self._check_controller)

    def _check_controller(self) -> None:
        """End this proc if the controller has been silent for the heartbeat timeout.

        Silence is counted in time this thread was awake to hear: a check that
        runs late (another thread held the interpreter's lock, the host had no
        CPU to spare) counts for two intervals at most, since heartbeats that came
        meanwhile may not be read yet.
        """
        now = time.monotonic()
        self._silence += min(now - self._last_check, 2 * self.heartbeat_interval)
        self._last_check = now
        if self._silence > self.heartbeat_timeout:
            log.error(
                "proc %s: controller silent for %.1f s; exiting", self.proc_id, self._silence
            )
            self.exit_now(70)
        self.io.call_later(self.heartbeat_interval, self._check_controller)

    def exit_now(self, code: int) -> NoReturn:
        """End this worker at once, and every proc it started (I/O thread, or any)."""
        self.launcher.kill_all()
        last_words.flush()
        os._exit(code)

    # ---- attaching workers (controller) ------------------------------------------------

    def attach(self, workers: Sequence[str], key: object, timeout: float) -> list[str]:
        if self.attacher is None:
            raise RuntimeError("only the controller attaches to workers")
        plan = attach_plan(workers, key, self.bind_host)
        base = self.root.new_id()
        agents = [f"{base}.{i}" for i in range(len(workers))]
        self._attach(plan, agents, timeout)
        return agents

    def _attach(self, plan: AttachPlan, agents: Sequence[str], timeout: float) -> None:
        keys, addresses = plan
        assert self.attacher is not None
        for agent, (ip, port) in zip(agents, addresses):
            self.host_addresses[agent] = ip
            boot = self.bootstrap(agent, "host", "", host_agent=agent, bind_host="", remote=True)
            self.io.call_soon(self.attacher.attach, agent, ip, port, keys, boot, timeout)

    async def release(self, agents: Sequence[str], final: bool) -> None:
        if self.attacher is None:
            return
        loop = asyncio.get_running_loop()
        waits: dict[asyncio.Future[None], str] = {}
        for agent in agents:
            future: asyncio.Future[None] = loop.create_future()
            waits[future] = agent
            self.io.call_soon(self.attacher.release, agent, final, settler(loop, future))
        if not waits:
            return
        _, late = await asyncio.wait(waits, timeout=RELEASE_TIMEOUT)
        for future in late:
            log.warning("the worker of host agent %s did not confirm its release", waits[future])
            self.io.call_soon(self.attacher.forget, waits[future])

    def _release_attached(self, timeout: float) -> None:
        """Release every attached worker (not from the I/O thread); wait up to ``timeout``."""
        attacher = self.attacher
        if attacher is None:
            return
        done = threading.Event()

        def start() -> None:
            agents = attacher.attached()
            remaining = [len(agents)]

            def settle(_: BaseException | None) -> None:
                remaining[0] -= 1
                if remaining[0] == 0:
                    done.set()

            if not agents:
                done.set()
            for agent in agents:
                attacher.release(agent, False, settle)

        self.io.call_soon(start)
        done.wait(timeout)

    # ---- the contract -----------------------------------------------------------------

    @property
    def root(self) -> Runtime:
        assert self._runtime is not None
        return self._runtime

    def hosts(self) -> Sequence[str]:
        return self.job_hosts or [self.host_agent]

    def default_command(self) -> BootstrapCommand:
        return default_command()

    def live_hosts(self) -> list[str]:
        if self.directory is None:
            raise RuntimeError("only the controller knows which hosts are up")
        return [host for host in self.hosts() if self.directory.live(host)]

    def actor_runner(self, name: str) -> ActorRunner:
        return ActorThread(f"danaus-actor-{name}")

    def shutdown(self) -> None:
        """Stop every mesh this process owns (gracefully, within a timeout), then every worker."""
        if self._closed:
            return
        self._closed = True
        if self._loop_thread is None:
            return
        try:
            stopping = asyncio.run_coroutine_threadsafe(self.root.client.stop_owned(), self.loop)
            stopping.result(timeout=2 * STOP_TIMEOUT)
        except Exception as exc:
            log.error("stopping meshes at shutdown failed: %r", exc)
        if self.trace_files:
            self._write_trace(self.trace_files)
        if self.admin_socket is not None:
            self.admin_socket.close()
        self._release_attached(RELEASE_TIMEOUT)
        self._stop_children()
        self.launcher.close()
        try:
            asyncio.run_coroutine_threadsafe(self._close_runtime(), self.loop).result(timeout=5)
        except Exception as exc:
            log.error("closing the runtime failed: %r", exc)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._loop_thread.join(5)
        if not self._loop_thread.is_alive():
            self.loop.close()
        self.io.stop()
        self.context.destroy(linger=0)

    def _write_trace(self, paths: list[str]) -> None:
        """Gather the events of the procs still alive and write the job's trace to ``paths``."""
        try:
            gathering = tracing.gather_events(self, TRACE_TIMEOUT)
            events = asyncio.run_coroutine_threadsafe(gathering, self.loop).result()
        except Exception as exc:
            log.error("gathering the trace failed: %r", exc)
            return
        for path in paths:
            try:
                tracing.write(events, path)
            except Exception as exc:
                log.error("writing the trace to %s failed: %r", path, exc)
            else:
                log.info("wrote %d trace events to %s", len(events), path)

    def _stop_children(self) -> None:
        done = threading.Event()

        def kill() -> None:
            self.launcher.kill_all()
            done.set()

        self.io.call_soon(kill)
        done.wait(2)

    async def _close_runtime(self) -> None:
        if self._runtime is not None:
            await self.transport.drain(STOP_LINGER)
            self._runtime.close()
        await cancel_leftover_tasks()

    def exit_proc(self, runtime: Runtime, code: int) -> None:
        last_words.flush()
        os._exit(code)

    def abort(self, status: int) -> NoReturn:
        """End the controller: kill every worker, run the program's ``atexit`` handlers, then
        exit with ``status``.

        Called where a failure reached the root unhandled: the loop's thread,
        while the program's main thread may be anywhere, so that thread is not
        unwound. The handlers run on a thread of their own, for at most
        `EXIT_HANDLERS_TIME` seconds; Danaus's own (a graceful shutdown) has
        nothing left to do and is skipped.
        """
        if self.admin_socket is not None:
            self.admin_socket.close()
        for path in self.trace_files:
            with contextlib.suppress(Exception):
                tracing.write(self.trace.events, path)
        if self._loop_thread is not None:
            self._stop_children()
            self._release_attached(1.0)
        atexit.unregister(config.shutdown)
        handlers = threading.Thread(target=atexit._run_exitfuncs, name="atexit", daemon=True)
        handlers.start()
        handlers.join(EXIT_HANDLERS_TIME)
        with last_words.ending():
            os._exit(status)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.proc_id} at {self.transport.address.control}>"


EXIT_HANDLERS_TIME = 5.0
"""Seconds the program's ``atexit`` handlers may take when the controller aborts."""


def _write_output(stream: int, text: str) -> None:
    """Write a child's lines to this process's stdout or stderr."""
    sink = sys.stdout if stream == STDOUT else sys.stderr
    sink.write(text)
    sink.flush()


AttachPlan = tuple[JobKeys, list[tuple[str, int]]]


def attach_plan(workers: Sequence[str], key: object, bind_host: str) -> AttachPlan:
    """The job's keys and the workers' addresses, checked before anything starts."""
    keys = jobkey.resolve(key)  # type: ignore[arg-type]
    addresses = [hostlink.parse_address(worker) for worker in workers]
    if is_loopback(bind_host):
        remote = [w for w, (ip, _) in zip(workers, addresses) if not hostlink.is_loopback(ip)]
        if remote:
            raise ValueError(
                f"this controller listens on {bind_host} only, which workers on other hosts "
                f"({', '.join(remote)}) cannot reach: name the address to listen on with "
                f"configure(bind_host=...) or {BIND_HOST_ENV}"
            )
    return keys, addresses


def worker_main(boot: Bootstrap, parent: int | None = None) -> None:
    """Entry point of ``python -m danaus.transports.tcp.worker`` once the bootstrap is read.

    ``parent`` is a pidfd of the process that launched this one: when it ends, so does this.
    """
    world_class = config.transport_module(boot.transport).World
    world = world_class.worker(boot)
    if parent is not None:
        world.io.call_soon(world.io.add_reader, parent, lambda: world.exit_now(70))
    config.install(world)
    try:
        world.serve_forever()
    finally:
        world.launcher.close()
        world.io.stop()
        world.context.destroy(linger=1000)


__all__ = ["TcpWorld", "worker_main"]
