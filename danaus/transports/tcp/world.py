"""A real process's world on the tcp transport.

Threads of a controller process: the user's (main code), the runtime loop
(``danaus-runtime``: actors' async code, routing, ports), the I/O thread
(``danaus-io``: sockets, directory, heartbeats, child processes) and one
thread per actor with sync endpoints. A worker process is the same, except
that its main thread runs the runtime loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import random
import socket
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import NoReturn, TypeVar

import zmq

from danaus import tracing
from danaus.admin.service import AdminService
from danaus.core.agents import HOST_AGENT, PROC_AGENT, HostAgent, ProcAgent
from danaus.core.blocking import ActorThread
from danaus.core.owned import STOP_TIMEOUT
from danaus.core.runtime import Runtime, cancel_leftover_tasks
from danaus.core.trace import Trace
from danaus.core.transport import ActorRunner, World
from danaus.debug import hook
from danaus.transports.tcp import control
from danaus.transports.tcp.admin import AdminSocket
from danaus.transports.tcp.bootstrap import Bootstrap
from danaus.transports.tcp.directory import Directory
from danaus.transports.tcp.faults import SignalFaults
from danaus.transports.tcp.ioloop import IoLoop
from danaus.transports.tcp.launcher import LocalLauncher
from danaus.transports.tcp.limits import Limits
from danaus.transports.tcp.refusals import RefusalLog
from danaus.transports.tcp.security import JobKeys, ZapHandler
from danaus.transports.tcp.transport import ROOT, TcpTransport

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
        self.io = IoLoop(f"danaus-io-{proc_id}")
        self.contexts = (zmq.Context(), zmq.Context())
        """Control plane's, data plane's: each its own zmq I/O thread (and ZAP handler)."""
        self.loop = asyncio.SelectorEventLoop()
        self.zaps = [ZapHandler(context, self.io, keys) for context in self.contexts]
        self.transport = self.transport_class(
            proc_id,
            host,
            self.io,
            self.contexts,
            keys,
            self.loop,
            bind_host=bind_host,
            limits=limits,
            refusals=RefusalLog(),
            controller_address=controller_address,
        )
        self.launcher = LocalLauncher(self)
        self.faults = SignalFaults(self)
        self.directory: Directory = None  # type: ignore[assignment]
        self._runtime: Runtime | None = None
        self._loop_thread: threading.Thread | None = None
        self._closed = False
        self._last_ping = time.monotonic()
        self.admin: AdminService | None = None
        """What `danaus top` and `danaus debug` ask (the controller only)."""
        self.admin_socket: AdminSocket | None = None
        self.trace_file: str | None = None
        """Where the controller writes the job's trace when it shuts down."""
        hook.install()

    # ---- making worlds ----------------------------------------------------------------

    @classmethod
    def controller(
        cls,
        heartbeat_interval: float = HEARTBEAT_INTERVAL,
        heartbeat_timeout: float = HEARTBEAT_TIMEOUT,
        bind_host: str = BIND_HOST,
        trace: bool | str | None = None,
        encrypt: bool = True,
        admin: bool = True,
        admin_host: str = ADMIN_HOST,
        **limits: float | None,
    ) -> TcpWorld:
        """The controller's world: the root proc, the directory, and this host's agent.

        ``trace``: True records the job's events, a path also writes them there
        at shutdown (`danaus.tracing`). ``admin``: serve `danaus top` and
        `danaus debug` on ``admin_host``. ``limits`` are the options of
        `Limits.from_options`.
        """
        trace_file = tracing.destination(trace)
        world = cls(
            proc_id=ROOT,
            host=socket.gethostname(),
            host_agent=ROOT,
            keys=JobKeys.generate(encrypt),
            heartbeat_interval=heartbeat_interval,
            heartbeat_timeout=heartbeat_timeout,
            bind_host=bind_host,
            limits=Limits.from_options(**limits),
            trace=bool(trace) or trace_file is not None,
        )
        world.trace_file = trace_file
        if admin:
            world.admin_socket = AdminSocket(world, admin_host)
        world.directory = Directory(
            world.transport.send_control,
            world.io,
            heartbeat_interval=heartbeat_interval,
            heartbeat_timeout=heartbeat_timeout,
            kill=world.launcher.kill,
        )
        world.transport.directory = world.directory
        world.directory.register_local(ROOT, world.transport.address, os.getpid(), world.host)
        world.io.start()
        world._loop_thread = threading.Thread(
            target=world._run_loop, name="danaus-runtime", daemon=True
        )
        world._loop_thread.start()
        world._runtime = world._on_loop(
            lambda: world._make_runtime({PROC_AGENT: ProcAgent, HOST_AGENT: HostAgent})
        )
        world.admin = AdminService(world)
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
        )
        world.transport.on_control = world._worker_control
        world.io.start()
        return world

    def _make_runtime(self, agents: dict[str, type]) -> Runtime:
        runtime = Runtime(
            self, self.proc_id, self.host, self.host_agent, self.transport, pid=os.getpid()
        )
        runtime.start({key: cls(runtime) for key, cls in agents.items()})
        return runtime

    def _run_loop(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

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
        self._runtime = self._make_runtime({PROC_AGENT: ProcAgent})
        hello = control.Hello(self.transport.address, os.getpid(), self.host)
        self.io.call_soon(self.transport.send_control, ROOT, hello)
        self.io.call_soon(self.io.call_later, self.heartbeat_interval, self._check_controller)
        try:
            self.loop.run_forever()
        finally:
            self.loop.run_until_complete(self._close_runtime())

    def _worker_control(self, src: str, message: control.Control) -> None:
        if isinstance(message, control.Ping):
            self._last_ping = time.monotonic()
            self.transport.send_control(ROOT, control.Pong(message.seq))
        elif isinstance(message, control.Exit):
            self.loop.call_soon_threadsafe(self.loop.stop)
        else:
            log.error("proc %s: unexpected %s from %s", self.proc_id, type(message).__name__, src)

    def _check_controller(self) -> None:
        silent = time.monotonic() - self._last_ping
        if silent > self.heartbeat_timeout:
            log.error("proc %s: controller silent for %.1f s; exiting", self.proc_id, silent)
            os._exit(70)
        self.io.call_later(self.heartbeat_interval, self._check_controller)

    # ---- the contract -----------------------------------------------------------------

    @property
    def root(self) -> Runtime:
        assert self._runtime is not None
        return self._runtime

    def hosts(self) -> Sequence[str]:
        return [self.host_agent]

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
        if self.trace_file is not None:
            self._write_trace(self.trace_file)
        if self.admin_socket is not None:
            self.admin_socket.close()
        self._stop_children()
        try:
            asyncio.run_coroutine_threadsafe(self._close_runtime(), self.loop).result(timeout=5)
        except Exception as exc:
            log.error("closing the runtime failed: %r", exc)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._loop_thread.join(5)
        self.io.stop()
        for context in self.contexts:
            context.destroy(linger=0)

    def _write_trace(self, path: str) -> None:
        """Gather the events of the procs still alive and write the job's trace to ``path``."""
        try:
            gathering = tracing.gather_events(self, TRACE_TIMEOUT)
            events = asyncio.run_coroutine_threadsafe(gathering, self.loop).result()
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
            self._runtime.close()
        await cancel_leftover_tasks()

    def exit_proc(self, runtime: Runtime, code: int) -> None:
        _flush()
        os._exit(code)

    def abort(self, status: int) -> NoReturn:
        """End the controller at once: kill every worker, then exit with ``status``."""
        if self.admin_socket is not None:
            self.admin_socket.close()
        if self.trace_file is not None:
            with contextlib.suppress(Exception):
                tracing.write(self.trace.events, self.trace_file)
        if self._loop_thread is not None:
            self._stop_children()
        _flush()
        os._exit(status)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.proc_id} at {self.transport.address.control}>"


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()


def worker_main(boot: Bootstrap) -> None:
    """Entry point of ``python -m danaus.transports.tcp.worker`` once the bootstrap is read."""
    from danaus.core import config

    world_class = config.transport_module(boot.transport).World
    world = world_class.worker(boot)
    config.install(world)
    try:
        world.serve_forever()
    finally:
        world.io.stop()
        for context in world.contexts:
            context.destroy(linger=1000)


__all__ = ["TcpWorld", "worker_main"]
