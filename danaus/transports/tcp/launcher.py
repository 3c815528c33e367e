"""Local launcher: worker processes on this machine, started and watched from the I/O thread.

Each worker is ``python -m danaus.transports.tcp.worker`` with its bootstrap (including the
job's secret key) written to its stdin. Its exit is noticed at once through a
pidfd; its stdout and stderr are copied to the controller's, line by line.
Workers die with the controller: they ask the kernel for a parent-death
signal, and they exit when the controller's heartbeats stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, TypeVar

import msgspec

from danaus.core.logs import LoggingOptions, OutputAggregator
from danaus.core.transport import Launcher, ProcLoss, ProcSpec
from danaus.transports.tcp import control
from danaus.transports.tcp.bootstrap import Bootstrap
from danaus.transports.tcp.ioloop import Settle, settler

if TYPE_CHECKING:
    from danaus.transports.tcp.world import TcpWorld

STARTUP_TIMEOUT = 60.0
STDERR_TAIL = 20

T = TypeVar("T")


@dataclass
class _Child:
    spec: ProcSpec
    popen: subprocess.Popen[bytes]
    pidfd: int
    started: Settle
    stderr_tail: list[str] = field(default_factory=list)
    partial: dict[int, bytes] = field(default_factory=dict)
    exited: Settle | None = None

    def outputs(self) -> tuple[tuple[IO[bytes], str], ...]:
        """The worker's stdout and stderr pipes, each with the name of the stream it goes to."""
        assert self.popen.stdout is not None and self.popen.stderr is not None
        return (self.popen.stdout, "stdout"), (self.popen.stderr, "stderr")


class LocalLauncher(Launcher):
    """Starts worker processes on this host."""

    def __init__(self, world: TcpWorld) -> None:
        self.world = world
        self._children: dict[str, _Child] = {}
        self._output = {
            stream: OutputAggregator(
                functools.partial(_write, stream), time.monotonic, world.io.call_later
            )
            for stream in ("stdout", "stderr")
        }

    def set_output(self, procs: Sequence[str], options: LoggingOptions) -> None:
        for aggregator in self._output.values():
            self.world.io.call_soon(aggregator.set_options, list(procs), options)

    async def launch(self, specs: Sequence[ProcSpec]) -> None:
        _check_process_limit(len(specs))
        waits = self._each_on_io(self._start, specs)
        try:
            await asyncio.wait_for(asyncio.gather(*waits), STARTUP_TIMEOUT)
        except asyncio.TimeoutError:
            raise RuntimeError(f"procs did not start within {STARTUP_TIMEOUT:g} s") from None

    async def stop(self, procs: Sequence[str], timeout: float) -> None:
        waits = self._each_on_io(self._ask_exit, procs)
        if not waits:
            return
        _, pending = await asyncio.wait(waits, timeout=timeout)
        if pending:
            for proc in procs:
                self.world.io.call_soon(self.kill, proc)
            await asyncio.wait(pending, timeout=timeout)

    def _each_on_io(
        self, fn: Callable[[T, Settle], None], items: Iterable[T]
    ) -> list[asyncio.Future[None]]:
        """Call ``fn(item, settle)`` on the I/O thread for each item; the futures they settle."""
        loop = asyncio.get_running_loop()
        futures: list[asyncio.Future[None]] = []
        for item in items:
            future: asyncio.Future[None] = loop.create_future()
            futures.append(future)
            self.world.io.call_soon(fn, item, settler(loop, future))
        return futures

    # ---- I/O thread -------------------------------------------------------------------

    def _start(self, spec: ProcSpec, started: Settle) -> None:
        world = self.world
        bootstrap = Bootstrap(
            proc_id=spec.proc_id,
            name=spec.name,
            host=spec.host,
            host_agent=world.root.proc_id,
            controller=world.transport.address.control,
            public_key=world.keys.public,
            secret_key=world.keys.secret,
            heartbeat_interval=world.heartbeat_interval,
            heartbeat_timeout=world.heartbeat_timeout,
            parent_pid=os.getpid(),
            sys_path=[p for p in sys.path if p],
            cwd=os.getcwd(),
            trace=world.trace.enabled,
            bind_host=world.bind_host,
            transport=world.name,
            encrypt=world.keys.encrypt,
            limits=msgspec.structs.asdict(world.limits),
        )
        try:
            popen = subprocess.Popen(
                [sys.executable, "-m", "danaus.transports.tcp.worker"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                close_fds=True,
            )
            assert popen.stdin is not None
            popen.stdin.write(bootstrap.encode())
            popen.stdin.close()
        except OSError as exc:
            started(RuntimeError(f"could not start proc {spec.proc_id}: {exc}"))
            return
        child = _Child(spec, popen, os.pidfd_open(popen.pid), started)
        self._children[spec.proc_id] = child
        world.directory.expect(spec.proc_id, lambda: started(None))
        world.io.add_reader(child.pidfd, lambda: self._exited(child))
        for pipe, stream in child.outputs():
            os.set_blocking(pipe.fileno(), False)
            world.io.add_reader(pipe.fileno(), functools.partial(self._drain, child, pipe, stream))

    def _ask_exit(self, proc: str, exited: Settle) -> None:
        child = self._children.get(proc)
        if child is None:
            exited(None)
            return
        child.exited = exited
        self.world.transport.send_control(proc, control.Exit())

    def kill(self, proc: str, sig: int = signal.SIGKILL) -> None:
        """Signal a worker (I/O thread)."""
        child = self._children.get(proc)
        if child is not None:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(child.pidfd, sig)

    def kill_all(self) -> None:
        for proc in list(self._children):
            self.kill(proc)

    def children(self) -> list[str]:
        """The procs this launcher started that are still running."""
        return list(self._children)

    def _exited(self, child: _Child) -> None:
        io = self.world.io
        io.remove_reader(child.pidfd)
        os.close(child.pidfd)
        self._children.pop(child.spec.proc_id, None)
        code = child.popen.wait()
        for pipe, stream in child.outputs():
            self._drain(child, pipe, stream)
            io.remove_reader(pipe.fileno())
            pipe.close()
        for aggregator in self._output.values():
            aggregator.forget(child.spec.proc_id)
        loss = ProcLoss(
            child.spec.proc_id,
            "exited" if code >= 0 else "was killed",
            host=child.spec.host,
            pid=child.popen.pid,
            exit_code=code if code >= 0 else None,
            signal=-code if code < 0 else None,
        )
        self.world.directory.lost(loss)
        tail = "".join(child.stderr_tail)
        child.started(RuntimeError(f"{loss.describe()} before it started:\n{tail}"))
        if child.exited is not None:
            child.exited(None)

    def _drain(self, child: _Child, pipe: IO[bytes], stream: str) -> None:
        """Copy complete lines from a worker's pipe to the controller's stream."""
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

    def _emit(self, child: _Child, stream: str, data: bytes) -> None:
        text = data.decode(errors="replace")
        if stream == "stderr":
            child.stderr_tail.extend(text.splitlines(keepends=True))
            del child.stderr_tail[:-STDERR_TAIL]
        self._output[stream].write(child.spec.proc_id, text)


def _write(stream: str, text: str) -> None:
    """Write to the controller's ``sys.stdout`` or ``sys.stderr`` as it is now."""
    sink = getattr(sys, stream)
    sink.write(text)
    sink.flush()


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
    uid = os.getuid()
    used = 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if os.stat(entry.path).st_uid == uid:
                    used += len(os.listdir(f"{entry.path}/task"))
    needed = count * THREADS_PER_PROC
    if used + needed > soft:
        raise RuntimeError(
            f"starting {count} procs needs about {needed} more threads; this user runs {used} "
            f"and the host's limit (ulimit -u) is {soft}"
        )
