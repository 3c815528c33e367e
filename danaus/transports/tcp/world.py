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
import types
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import msgspec
import zmq

from danaus import tracing
from danaus.core import awake, config, home_cpu, last_words
from danaus.core.attach import ATTACH_TIMEOUT
from danaus.core.blocking import ActorThread, cancel_leftover_tasks
from danaus.core.bootstrap import BootstrapCommand
from danaus.core.faults import HostControl
from danaus.core.owned import STOP_TIMEOUT
from danaus.core.runtime import Runtime
from danaus.core.serialize import loads
from danaus.core.settings import JobOptions, Settings, variable
from danaus.core.trace import Trace
from danaus.core.transport import ActorRunner, World
from danaus.debug import hook
from danaus.transports.tcp import control, hostlink, jobkey
from danaus.transports.tcp.activity import ProcessActivity
from danaus.transports.tcp.bootstrap import Bootstrap, search_path
from danaus.transports.tcp.children import STDOUT, Children, Output
from danaus.transports.tcp.directory import Directory
from danaus.transports.tcp.faults import SignalFaults
from danaus.transports.tcp.forkserver import POOL
from danaus.transports.tcp.ioloop import IoLoop, settler
from danaus.transports.tcp.launcher import LocalLauncher, Registry, default_command
from danaus.transports.tcp.refusals import RefusalLog
from danaus.transports.tcp.remote import RemoteRegistry, forward_output
from danaus.transports.tcp.security import JobKeys, ZapHandler
from danaus.transports.tcp.streams import STOP_LINGER
from danaus.transports.tcp.transport import ROOT, TcpTransport

if TYPE_CHECKING:
    from danaus.admin.logs import LogBook
    from danaus.admin.service import AdminService
    from danaus.transports.tcp.admin import AdminSocket
    from danaus.transports.tcp.attacher import Attacher

log = logging.getLogger("danaus.tcp")

T = TypeVar("T")

TRACE_TIMEOUT = 5.0
"""How long a controller writing its trace at shutdown waits for each proc's events."""
RELEASE_TIMEOUT = 3.0
"""Seconds a worker may take to confirm that it ended the host agent of a released host."""


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class TcpWorld(World):
    """One OS process's procs (exactly one) on the tcp transport.

    Made whole by its constructor, for a controller (``controller_address``
    None: it runs the job's directory, attaches workers and serves the admin
    tools) or a worker process (a proc, or a host agent on another host). Its
    helpers get what they use of it, and no more.
    """

    name = "tcp"
    transport_class: type[TcpTransport] = TcpTransport
    launcher: LocalLauncher

    def __init__(
        self,
        *,
        proc_id: str,
        host: str,
        host_agent: str,
        keys: JobKeys,
        options: JobOptions,
        bind_host: str,
        controller_address: str | None = None,
        job_hosts: Sequence[str] = (),
        remote: bool = False,
        home_cpu: int | None = None,
        setup: list[bytes] | None = None,
        controller_pid: int | None = None,
        admin_host: str | None = None,
        host_control: HostControl | None = None,
        trace_files: Sequence[str] = (),
    ) -> None:
        self.proc_id = proc_id
        self.host = host
        self.host_agent = host_agent
        self.keys = keys
        self.options = options
        self.bind_host = bind_host
        self.job_hosts = list(job_hosts)
        """The host agents of the job's hosts (``danaus.hosts()``), if it names workers."""
        self.remote = remote
        """Whether the procs this process launches run on another host than the controller."""
        self.home_cpu = home_cpu
        """This proc's home CPU (`danaus.core.home_cpu`), or None: its threads go anywhere."""
        self.trace_files = list(trace_files)
        """Where the controller writes the job's trace when it shuts down."""
        self.waits = awake.Waits(options.wait_spin_us)
        """How this proc's threads wait: its runtime loop's, its actors', its callers'."""
        self.trace = Trace(time.monotonic, enabled=bool(options.trace))
        self.random = random.Random()
        self.io = IoLoop(f"danaus-io-{proc_id}")
        self.context = zmq.Context()
        """The control plane's: its zmq I/O thread, and its ZAP handler."""
        self.loop = awake.AwakeLoop(self.waits)
        self.zap = ZapHandler(self.context, self.io, keys)
        refusals = RefusalLog(self.io.call_later_threadsafe)
        self.transport = self.transport_class(
            proc_id,
            host,
            self.io,
            self.context,
            keys,
            self.loop,
            bind_host=bind_host,
            limits=options,
            refusals=refusals,
            controller_address=controller_address,
        )
        self.controller_address = controller_address or self.transport.address.control
        self.children = Children()
        """The processes this proc's launcher started that still run."""
        self.host_addresses: dict[str, str] = {}
        """The address of each attached host's worker, by host agent (the controller only)."""
        self.directory: Directory | None = None
        """The job's directory, in the controller only."""
        self.attacher: Attacher | None = None
        self.admin_socket: AdminSocket | None = None
        self.logs: LogBook | None = None
        """The lines of the job's procs, kept for the admin tools (the controller only)."""
        self.admin: AdminService | None = None
        """What `danaus top` and `danaus debug` ask (the controller, once it runs)."""
        registry: Registry
        self.output: Output = _write_output
        """Where the output of the procs this one started goes (stream 1 or 2, text)."""
        if controller_address is None:
            registry = self._controlling(admin_host, refusals)
        else:
            registry = RemoteRegistry(self.transport)
            if host_agent == proc_id:
                self.output = forward_output(self.transport)
            self.transport.on_control = self._worker_control
        self.launcher = LocalLauncher(
            proc_id=proc_id,
            host=host,
            transport=self.name,
            options=options,
            io=self.io,
            registry=registry,
            children=self.children,
            bootstrap=self.bootstrap,
            send_control=self.transport.send_control,
            output=self.output,
        )
        self.faults = SignalFaults(
            io=self.io,
            directory=self.directory,
            children=self.children,
            own_proc=proc_id,
            own_host=host_agent,
            own_machine=bind_host,
            machines=types.MappingProxyType(self.host_addresses),
            control=host_control,
        )
        self._setup = setup
        self._runtime: Runtime | None = None
        self._loop_thread: threading.Thread | None = None
        self._closed = False
        self._silence = 0.0
        """Seconds this proc's I/O thread has been awake since the controller's last heartbeat."""
        self._heard = False
        """Whether a heartbeat came since `_check_controller` last ran."""
        self._last_check = 0.0
        """When `_check_controller` last ran (``time.monotonic``)."""
        self._controller_activity = (
            ProcessActivity(controller_pid) if controller_pid is not None else None
        )
        """The controller's process, where this proc runs on its host and was started by it."""
        hook.install()

    def _controlling(self, admin_host: str | None, refusals: RefusalLog) -> Registry:
        """Make what only the controller has: the job's directory (where its launcher reports,
        which it returns), the attacher of workers, the admin socket, and the log of the procs'
        output that the admin tools read."""
        # What only a controller runs is imported here, off a worker's start-up.
        from danaus.admin.logs import LogBook
        from danaus.transports.tcp.admin import AdminSocket
        from danaus.transports.tcp.attacher import Attacher

        options = self.options
        self.directory = Directory(
            self.transport.send_control,
            self.io,
            heartbeat_interval=options.heartbeat_interval,
            heartbeat_timeout=options.heartbeat_timeout,
            kill=self.children.kill,
            process_state=self.children.state,
        )
        self.transport.directory = self.directory
        self.transport.on_control = self._controller_control
        self.attacher = Attacher(self.context, self.io, self.directory)
        if admin_host is not None:
            self.admin_socket = AdminSocket(
                io=self.io,
                loop=self.loop,
                bind_host=admin_host,
                limits=options,
                refusals=refusals,
                proc_id=self.proc_id,
                transport=self.name,
            )
        self.logs = LogBook()
        self.output = self.logs.tee(_write_output)
        return self.directory

    @classmethod
    def controller(cls, settings: Settings) -> TcpWorld:
        """The controller's world, started: the root proc, the directory, and this host's agent.

        With ``workers`` in ``settings``, it attaches to them at once: they are
        the job's hosts (``hosts()``), and ``this_host()`` in the controller is
        the first of them.
        """
        plan = None
        if settings.workers:
            plan = jobkey.resolve(None, settings), attach_plan(settings.workers, settings.bind_host)
        job_hosts = [f"hosts.{i}" for i in range(len(settings.workers))]
        options = msgspec.structs.replace(
            settings.job_options(), max_message_bytes=settings.payload_bytes
        )
        if not settings.workers:
            # tcp's prepare() has started one already, unless the environment changed since;
            # ucx and verbs start theirs here.
            POOL.ahead(cls.name, options.preload)
        world = cls(
            proc_id=ROOT,
            host=socket.gethostname(),
            host_agent=job_hosts[0] if job_hosts else ROOT,
            keys=JobKeys.generate(options.encrypt),
            options=options,
            bind_host=settings.bind_host,
            job_hosts=job_hosts,
            home_cpu=home_cpu.home_for(0) if options.home_cpus else None,
            admin_host=settings.admin_host if settings.admin else None,
            host_control=settings.host_control,
            trace_files=tracing.destinations(options.trace),
        )
        world._start_controller(plan, job_hosts)
        return world

    def _start_controller(self, plan: AttachPlan | None, job_hosts: list[str]) -> None:
        """Register the root proc, start the threads, attach the workers, and serve."""
        from danaus.admin.service import AdminService

        assert self.directory is not None and self.logs is not None
        self.directory.register_local(ROOT, self.transport.address, os.getpid(), self.host)
        last_words.install()
        self.io.start()
        self._loop_thread = threading.Thread(
            target=self._run_loop, name="danaus-runtime", daemon=True
        )
        self._loop_thread.start()
        if plan is not None:
            self._attach(plan, job_hosts, ATTACH_TIMEOUT)
        self._runtime = self._on_loop(lambda: self._make_runtime(host_agent=True))
        self.admin = AdminService(self, self.logs)
        if self.admin_socket is not None:
            self.admin_socket.serve(self.admin)

    @classmethod
    def worker(cls, boot: Bootstrap) -> TcpWorld:
        """A worker's world, from the bootstrap its launcher wrote to its stdin."""
        world = cls(
            proc_id=boot.proc_id,
            host=boot.host,
            host_agent=boot.host_agent,
            keys=JobKeys(boot.public_key, boot.secret_key, boot.options.encrypt),
            options=boot.options,
            bind_host=boot.bind_host,
            controller_address=boot.controller,
            job_hosts=boot.hosts,
            remote=boot.is_host_agent,
            home_cpu=boot.home_cpu,
            setup=boot.setup,
            # A proc the controller started on its own host can see the controller's process.
            controller_pid=boot.parent_pid if boot.host_agent == ROOT and not boot.remote else None,
        )
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
                "parent_pid": os.getpid(),
                "sys_path": search_path(),
                "cwd": os.getcwd(),
                "bind_host": self.bind_host,
                "options": self.options,
                "transport": self.name,
                "hosts": list(self.job_hosts),
                "remote": self.remote,
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

    def _settle(self) -> None:
        """Pin this thread, the runtime loop's, to the proc's home CPU, if it has one."""
        if self.home_cpu is not None:
            home_cpu.settle(self.home_cpu)

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
            self._heard = True
            self.transport.send_control(ROOT, control.Pong(message.seq))
        elif isinstance(message, control.Exit):
            self.loop.call_soon_threadsafe(self.loop.stop)
        elif isinstance(message, control.Signal) and self.host_agent == self.proc_id:
            self.children.kill(message.proc, message.signal)
        elif isinstance(message, control.Check) and self.host_agent == self.proc_id:
            state = self.children.state(message.proc) or "halted"
            self.transport.send_control(ROOT, control.Running(message.proc, state))
        else:
            log.error("proc %s: unexpected %s from %s", self.proc_id, type(message).__name__, src)

    def _controller_control(self, src: str, message: control.Control) -> None:
        assert self.directory is not None
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
        self.io.call_later(self.options.heartbeat_interval, self._check_controller)

    def _check_controller(self) -> None:
        """End this proc if the controller has been silent for the heartbeat timeout.

        An interval in which a heartbeat came is not silent. Silence is counted
        in time this thread was awake to hear: a check that runs late (another
        thread held the interpreter's lock, the host had no CPU to spare) counts
        for two intervals at most, since heartbeats that came meanwhile may not
        be read yet. On the controller's own host, an interval
        in which the controller's process was seen running does not count: its
        heartbeats wait for its interpreter's lock (held by a long import or call
        into C), not for a process that is gone, paused or wedged.
        """
        now = time.monotonic()
        waited = min(now - self._last_check, 2 * self.options.heartbeat_interval)
        self._last_check = now
        heard, self._heard = self._heard, False
        if not heard and not self._controller_runs():
            self._silence += waited
        if self._silence > self.options.heartbeat_timeout:
            log.error(
                "proc %s: controller silent for %.1f s; exiting", self.proc_id, self._silence
            )
            self.exit_now(70)
        self.io.call_later(self.options.heartbeat_interval, self._check_controller)

    def _controller_runs(self) -> bool:
        """Whether the controller's process was seen running (asked of the kernel only when
        its heartbeats stop: a healthy job's procs do not poll it)."""
        return self._controller_activity is not None and self._controller_activity.state() == "runs"

    def exit_now(self, code: int) -> NoReturn:
        """End this worker at once, and every proc it started (I/O thread, or any)."""
        self.children.kill_all()
        last_words.flush()
        os._exit(code)

    def attach(self, workers: Sequence[str], key: object, timeout: float) -> list[str]:
        if self.attacher is None:
            raise RuntimeError("only the controller attaches to workers")
        keys = jobkey.resolve(key, config.settings())  # type: ignore[arg-type]
        plan = keys, attach_plan(workers, self.bind_host)
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
        return ActorThread(f"danaus-actor-{name}", self.waits)

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
            self.children.kill_all()
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


def attach_plan(workers: Sequence[str], bind_host: str) -> list[tuple[str, int]]:
    """The workers' addresses, checked before anything starts: workers on other hosts must
    reach ``bind_host``, where the controller listens."""
    addresses = [hostlink.parse_address(worker) for worker in workers]
    if is_loopback(bind_host):
        remote = [w for w, (ip, _) in zip(workers, addresses) if not hostlink.is_loopback(ip)]
        if remote:
            raise ValueError(
                f"this controller listens on {bind_host} only, which workers on other hosts "
                f"({', '.join(remote)}) cannot reach: name the address to listen on with "
                f"configure(bind_host=...) or {variable('bind_host')}"
            )
    return addresses


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
