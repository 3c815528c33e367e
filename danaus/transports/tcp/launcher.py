"""Local launcher: worker processes on this machine, started on a thread of their own, watched
from the I/O thread.

Each worker is ``python -m danaus.transports.tcp.worker`` (or the proc's own
`BootstrapCommand`, which must end up running it) with its bootstrap
(including the job's secret key) written to its stdin. Its exit is noticed at
once through a pidfd and reported to its registry (the controller's
directory, or, on another host, the controller through messages); its stdout
and stderr are copied, line by line, to its output (the controller's
terminal, or, on another host, messages to the controller). Workers die with
whoever launched them: they ask the kernel for a parent-death signal and
watch their launcher's pidfd, and they exit when the controller's heartbeats
stop.

Starting a process waits until it has exec'd, which on a busy machine can take
a while; so processes are started by a thread of their own, never the I/O
thread, whose heartbeats (a host agent answers the controller's) must not
wait. The parent-death signal is sent when the thread that started a process
ends: that thread lives until the launcher is closed, and closing it ends
every process it started.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import os
import queue
import resource
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import IO, Protocol, TypeVar

from danaus.core import home_cpu
from danaus.core.bootstrap import BootstrapCommand
from danaus.core.logs import LoggingOptions, OutputAggregator
from danaus.core.settings import JobOptions
from danaus.core.transport import Launcher, ProcLoss, ProcSpec
from danaus.progress import Progress
from danaus.transports.tcp import control
from danaus.transports.tcp.allocator import proc_environment
from danaus.transports.tcp.bootstrap import Bootstrap
from danaus.transports.tcp.budget import ProcBudget
from danaus.transports.tcp.children import STDERR, STDOUT, Child, Children, Output
from danaus.transports.tcp.forkserver import POOL, ForkServer
from danaus.transports.tcp.ioloop import IoLoop, Settle, settler
from danaus.wording import counted

log = logging.getLogger("danaus.launcher")

STARTUP_TIMEOUT = 60.0
STDERR_TAIL = 20
WORKER_MODULE = "danaus.transports.tcp.worker"

T = TypeVar("T")


class Registry(Protocol):
    """Where a launcher's children are registered and their ends reported (I/O thread)."""

    def expect(self, proc: str, on_hello: Callable[[], None]) -> None:
        """Call ``on_hello`` once ``proc`` has registered with the directory."""

    def lost(self, loss: ProcLoss) -> None:
        """``loss.proc``, a child of this launcher, is gone."""


class MakeBootstrap(Protocol):
    """What a proc the launcher starts is told: its `Bootstrap` (``fields`` override the rest)."""

    def __call__(self, proc_id: str, name: str, host: str, **fields: object) -> Bootstrap: ...


def default_argv() -> list[str]:
    """How a proc's process is started unless its `BootstrapCommand` says otherwise."""
    return [sys.executable, "-m", WORKER_MODULE]


def default_command() -> BootstrapCommand:
    """`default_argv` as a `BootstrapCommand`, a base for commands of one's own."""
    program, *args = default_argv()
    return BootstrapCommand(program, None, args, {})


CLOSE_TIMEOUT = 2.0
"""Seconds a closing launcher waits for its starts under way, and for its children's ends."""
CLOSE_POLL = 0.01


class _Starter:
    """The thread that starts a launcher's processes, and outlives none of them."""

    def __init__(self, name: str) -> None:
        self._calls: queue.SimpleQueue[tuple[Callable[..., None], tuple[object, ...]] | None]
        self._calls = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def call_soon(self, fn: Callable[..., None], *args: object) -> None:
        self._calls.put((fn, args))

    def close(self, timeout: float) -> None:
        """Start nothing more; wait up to ``timeout`` s for what is under way."""
        self._calls.put(None)
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def _run(self) -> None:
        while (call := self._calls.get()) is not None:
            fn, args = call
            try:
                fn(*args)
            except Exception:
                log.exception("error starting a process in %r", fn)


class LocalLauncher(Launcher):
    """Starts worker processes on this host.

    ``proc_id`` is the proc of this process (the host agent of those it starts)
    on ``host``; ``transport`` names the fork server's; ``options`` are the
    job's, of which it applies ``preload``, ``home_cpus`` and
    ``max_procs_per_host``. It registers its children with ``registry`` and
    keeps them in ``children``; ``bootstrap`` says what each is told,
    ``send_control`` asks one to exit, and their lines go to ``output``.
    """

    def __init__(
        self,
        *,
        proc_id: str,
        host: str,
        transport: str,
        options: JobOptions,
        io: IoLoop,
        registry: Registry,
        children: Children,
        bootstrap: MakeBootstrap,
        send_control: Callable[[str, control.Control], None],
        output: Output,
    ) -> None:
        self._transport = transport
        self._options = options
        self._io = io
        self._registry = registry
        self._children = children
        self._bootstrap = bootstrap
        self._send_control = send_control
        self._forked: dict[int, Child] = {}
        """The running children that the fork server started, by pid."""
        self._early_exits: dict[int, int] = {}
        """Exit codes the fork server reported before their child was watched, by pid."""
        self._forks: ForkServer | None = None
        """Starts workers by forking, from the first launch on; None before, or if it cannot."""
        self._forks_tried = False
        self._launched = itertools.count(1)
        """Numbers the procs started here, for their home CPUs (0 is this process's own)."""
        self.budget = ProcBudget(host, options.max_procs_per_host)
        """The procs started here that have not ended, and whether more fit."""
        self._starter = _Starter(f"danaus-start-{proc_id}")
        self._output = {
            stream: OutputAggregator(
                functools.partial(output, stream), time.monotonic, io.call_later
            )
            for stream in (STDOUT, STDERR)
        }

    def close(self) -> None:
        """Stop starting processes; those still running are killed (their parent-death signal).

        The fork server goes back to the process's pool once every child it
        forked for this launcher has been reported gone (they were stopped
        before); otherwise it is closed, and its children die with it.
        """
        self._starter.close(CLOSE_TIMEOUT)
        forks, self._forks = self._forks, None
        if forks is None:
            return
        if self._detach(forks) and forks.alive():
            POOL.give_back(forks)
        else:
            forks.close()

    def _detach(self, forks: ForkServer) -> bool:
        """Stop reading ``forks``'s reports once none is awaited; False if one still is."""
        deadline = time.monotonic() + CLOSE_TIMEOUT
        while not self._on_io(functools.partial(self._detached, forks)):
            if time.monotonic() > deadline:
                return False
            time.sleep(CLOSE_POLL)
        return True

    def _detached(self, forks: ForkServer) -> bool:
        if self._forked or self._early_exits:
            return False
        self._io.remove_reader(forks.exits.fileno())
        return True

    def _on_io(self, fn: Callable[[], bool]) -> bool:
        """``fn()`` run on the I/O thread; False if it did not run within `CLOSE_TIMEOUT`."""
        answer: list[bool] = []
        ran = threading.Event()

        def run() -> None:
            answer.append(fn())
            ran.set()

        self._io.call_soon(run)
        return ran.wait(CLOSE_TIMEOUT) and answer[0]

    def set_output(self, procs: Sequence[str], options: LoggingOptions) -> None:
        for aggregator in self._output.values():
            self._io.call_soon(aggregator.set_options, list(procs), options)

    async def launch(self, specs: Sequence[ProcSpec]) -> None:
        try:
            _check_process_limit(len(specs))
            self.budget.admit(spec.proc_id for spec in specs)
        except RuntimeError as refusal:
            self._not_started(specs, refusal)
            raise
        waits = self._each(self._starter.call_soon, self._start, specs)
        for spec, wait in zip(specs, waits):
            wait.add_done_callback(functools.partial(self._up, spec.proc_id))
        with Progress(f"starting {counted(len(specs), 'proc')}", len(specs)) as progress:
            for wait in waits:
                wait.add_done_callback(lambda _: progress.advance())
            try:
                await asyncio.wait_for(asyncio.gather(*waits), STARTUP_TIMEOUT)
            except asyncio.TimeoutError:
                for spec in specs:
                    self._io.call_soon(self._children.kill, spec.proc_id)
                raise RuntimeError(f"procs did not start within {STARTUP_TIMEOUT:g} s") from None

    def _not_started(self, specs: Sequence[ProcSpec], refusal: RuntimeError) -> None:
        """Report the procs of a refused request lost, so that nothing waits for them."""
        for spec in specs:
            loss = ProcLoss(spec.proc_id, f"was not started: {refusal}", host=spec.host)
            self._io.call_soon(self._registry.lost, loss)

    def _up(self, proc: str, _: asyncio.Future[None]) -> None:
        self.budget.started(proc)

    async def stop(self, procs: Sequence[str], timeout: float) -> None:
        waits = self._each(self._io.call_soon, self._ask_exit, procs)
        if not waits:
            return
        _, pending = await asyncio.wait(waits, timeout=timeout)
        if pending:
            for proc in procs:
                self._io.call_soon(self._children.kill, proc)
            await asyncio.wait(pending, timeout=timeout)

    def _each(
        self,
        call_soon: Callable[..., None],
        fn: Callable[[T, Settle], None],
        items: Iterable[T],
    ) -> list[asyncio.Future[None]]:
        """Have ``call_soon`` run ``fn(item, settle)`` for each item; the futures they settle."""
        loop = asyncio.get_running_loop()
        futures: list[asyncio.Future[None]] = []
        for item in items:
            future: asyncio.Future[None] = loop.create_future()
            futures.append(future)
            call_soon(fn, item, settler(loop, future))
        return futures

    # The methods below run on the starter's thread.

    def _fork_server(self) -> ForkServer | None:
        """The fork server, started the first time it is asked for (most workers never launch)."""
        if not self._forks_tried:
            self._forks_tried = True
            self._start_fork_server()
        return self._forks

    def _start_fork_server(self) -> None:
        try:
            forks = POOL.take(self._transport, self._options.preload)
        except OSError as exc:
            log.warning("procs start as new interpreters: no fork server (%s)", exc)
            return
        self._forks = forks
        reader = functools.partial(self._read_exits, forks)
        self._io.call_soon(self._io.add_reader, forks.exits.fileno(), reader)

    def _close_fork_server(self) -> None:
        forks, self._forks = self._forks, None
        if forks is not None:
            forks.close()

    def _start(self, spec: ProcSpec, started: Settle) -> None:
        """Start ``spec``'s process (the starter's thread); the I/O thread watches it."""
        setup = [bytes(frame) for frame in spec.setup] if spec.setup is not None else None
        home = home_cpu.home_for(next(self._launched)) if self._options.home_cpus else None
        bootstrap = self._bootstrap(spec.proc_id, spec.name, spec.host, setup=setup, home_cpu=home)
        forks = self._fork_server() if spec.command is None else None
        if forks is not None and forks.fits(os.environ):
            try:
                pid, stdin, stdout, stderr = forks.fork()
            except OSError as exc:
                log.warning("procs start as new interpreters: the fork server failed (%s)", exc)
                self._close_fork_server()
            else:
                self._io.call_soon(self._watch, spec, pid, stdout, stderr, started, None)
                _hand_over(stdin, bootstrap)
                return
        self._start_interpreter(spec, bootstrap, started)

    def _start_interpreter(self, spec: ProcSpec, bootstrap: Bootstrap, started: Settle) -> None:
        """Start ``spec``'s process as a new interpreter (its `BootstrapCommand`, if it has one)."""
        command = spec.command
        extra = command.env if command is not None else {}
        try:
            popen = subprocess.Popen(
                command.argv() if command is not None else default_argv(),
                executable=command.program if command is not None else None,
                env=proc_environment({**os.environ, **extra}),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                close_fds=True,
            )
        except OSError as exc:
            loss = ProcLoss(spec.proc_id, f"could not be started ({exc})", host=spec.host)
            self.budget.ended(spec.proc_id)
            self._io.call_soon(self._registry.lost, loss)
            started(RuntimeError(loss.describe()))
            return
        assert popen.stdin is not None and popen.stdout is not None and popen.stderr is not None
        self._io.call_soon(
            self._watch, spec, popen.pid, popen.stdout, popen.stderr, started, popen.wait
        )
        _hand_over(popen.stdin, bootstrap)

    # The methods below run on the I/O thread.

    def _watch(
        self,
        spec: ProcSpec,
        pid: int,
        stdout: IO[bytes],
        stderr: IO[bytes],
        started: Settle,
        wait: Callable[[], int] | None,
    ) -> None:
        """Watch a started process: its exit through ``wait`` once its pidfd is readable, or,
        for the fork server's children (``wait`` None), as the server reports it."""
        try:
            pidfd = os.pidfd_open(pid)
        except ProcessLookupError:
            pidfd = os.open("/dev/null", os.O_RDONLY)
        child = Child(spec, pid, stdout, stderr, pidfd, started)
        self._children.add(child)
        self._registry.expect(spec.proc_id, lambda: started(None))
        if wait is not None:
            self._io.add_reader(child.pidfd, lambda: self._exited(child, wait()))
        elif pid in self._early_exits:
            self._io.call_soon(self._exited, child, self._early_exits.pop(pid))
        else:
            self._forked[pid] = child
        for pipe, stream in child.outputs():
            os.set_blocking(pipe.fileno(), False)
            self._io.add_reader(pipe.fileno(), functools.partial(self._drain, child, pipe, stream))

    def _ask_exit(self, proc: str, exited: Settle) -> None:
        child = self._children.get(proc)
        if child is None:
            exited(None)
            return
        child.exited = exited
        self._send_control(proc, control.Exit())

    def _read_exits(self, forks: ForkServer) -> None:
        if not forks.read_exits(self._forked_exit):
            self._fork_server_ended(forks)

    def _forked_exit(self, pid: int, code: int) -> None:
        child = self._forked.pop(pid, None)
        if child is None:
            self._early_exits[pid] = code
        else:
            self._exited(child, code)

    def _fork_server_ended(self, forks: ForkServer) -> None:
        """The server's children die with it (their parent-death signal): each is reported
        killed once its pidfd says it has gone."""
        io = self._io
        io.remove_reader(forks.exits.fileno())
        forks.exits.close()
        for child in self._forked.values():
            io.add_reader(child.pidfd, functools.partial(self._exited, child, -signal.SIGKILL))
        self._forked.clear()

    def _exited(self, child: Child, code: int) -> None:
        io = self._io
        io.remove_reader(child.pidfd)
        os.close(child.pidfd)
        self._children.remove(child.spec.proc_id)
        self.budget.ended(child.spec.proc_id)
        for pipe, stream in child.outputs():
            self._drain(child, pipe, stream)
            io.remove_reader(pipe.fileno())
            pipe.close()
        for aggregator in self._output.values():
            aggregator.forget(child.spec.proc_id)
        stopped = child.exited is not None  # it was asked to exit: a stop, not a failure
        loss = ProcLoss(
            child.spec.proc_id,
            "was stopped" if stopped else "exited" if code >= 0 else "was killed",
            host=child.spec.host,
            pid=child.pid,
            exit_code=code if code >= 0 else None,
            signal=-code if code < 0 else None,
            stopped=stopped,
        )
        self._registry.lost(loss)
        tail = "".join(child.stderr_tail)
        child.started(RuntimeError(f"{loss.describe()} before it started:\n{tail}"))
        if child.exited is not None:
            child.exited(None)

    def _drain(self, child: Child, pipe: IO[bytes], stream: int) -> None:
        """Copy complete lines from a worker's pipe to the launcher's output."""
        fd = pipe.fileno()
        while True:
            try:
                chunk = os.read(fd, 65536)
            except (BlockingIOError, OSError):
                return
            if not chunk:
                rest = child.partial.pop(fd, b"")
                if rest:
                    self._emit(child, stream, rest + b"\n")
                return
            data = child.partial.pop(fd, b"") + chunk
            complete, _, rest = data.rpartition(b"\n")
            if rest:
                child.partial[fd] = rest
            if complete:
                self._emit(child, stream, complete + b"\n")

    def _emit(self, child: Child, stream: int, data: bytes) -> None:
        text = data.decode(errors="replace")
        if stream == STDERR:
            child.stderr_tail.extend(text.splitlines(keepends=True))
            del child.stderr_tail[:-STDERR_TAIL]
        self._output[stream].write(child.spec.proc_id, text)


def _hand_over(stdin: IO[bytes], bootstrap: Bootstrap) -> None:
    """Write a watched child's bootstrap: it can register only then, so the launcher knows
    it by the time it does (a signal held for it until then reaches it).

    A child that died first cannot read it; its end is reported as it is watched."""
    with contextlib.suppress(BrokenPipeError), stdin:
        stdin.write(bootstrap.encode())


THREADS_PER_PROC = 8
"""About how many threads a worker runs (runtime, I/O, zmq, actors); RLIMIT_NPROC counts them."""


def _check_process_limit(count: int) -> None:
    """Refuse, before starting any, ``count`` procs that the host's process limit would cut short.

    RLIMIT_NPROC counts every thread of the user; without this check, a large
    request forks until the kernel refuses, and leaves the rest half started.
    """
    soft, _ = resource.getrlimit(resource.RLIMIT_NPROC)
    if soft == resource.RLIM_INFINITY or os.geteuid() == 0:
        return
    # Imported only here, where few launchers come: with the module, psutil took about 5 ms of
    # CPU of every worker's (and fork server's) start.
    import psutil

    uid = os.getuid()
    used = sum(
        process.info["num_threads"] or 0
        for process in psutil.process_iter(["uids", "num_threads"])
        if process.info["uids"] is not None and process.info["uids"].real == uid
    )
    needed = count * THREADS_PER_PROC
    if used + needed > soft:
        raise RuntimeError(
            f"starting {count} procs needs about {needed} more threads; this user runs {used} "
            f"and the host's limit (ulimit -u) is {soft}"
        )
