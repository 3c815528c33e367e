"""The fork server: one process per launcher that has imported a worker's code, and forks workers.

A worker started as a new interpreter spends most of its start-up importing
Danaus, ZeroMQ, msgspec, asyncio and its transport (about 0.2 s of CPU for tcp,
0.7 s for ucx), and a mesh of many procs pays that once per proc. The fork
server pays it once: it is started with the launcher, imports what every worker
imports, and then forks a child per proc, which runs the same worker code a
new interpreter would (`danaus.transports.tcp.worker`), from its bootstrap on
stdin, and ends by finalizing its interpreter as any Python program does
(``atexit`` handlers and ``__del__`` run).

The server holds no thread, event loop, socket of ZeroMQ or UCX context when it
forks: it only imports, and freezes what the imports made (``gc.freeze``), so
that no child's garbage collector walks it, least of all the collection that ends
the child's interpreter (which took most of a stopped proc's 80 ms to exit).
Each child gets its stdin, stdout and stderr as pipes the launcher made (passed
over a Unix socket), and every file descriptor of the server's closed. The
server reports each child's pid when it forks it, and its exit status when it
has reaped it, since only a parent can learn that.

The launcher uses the server only for a proc with no `BootstrapCommand` and
when its environment is the one the server started with, since modules read
some variables when they are imported; any other proc starts as a new
interpreter. Every child dies with the server (its parent-death signal), and
the server ends when its request socket closes: when its launcher closes it,
or when the launcher's process ends, however it ends.

A launcher that closes with every child it forked reported gone gives its
server back to `POOL`, and the next launcher of the process for the same
transport, environment and preloads takes it instead of starting one: a program
(a test suite) that makes one world after another pays the server's imports
once. A controller starts its server ahead (`ForkServerPool.ahead`), not at its
first launch: on tcp as soon as the transport is chosen (`danaus.transports.tcp.prepare`,
from ``configure()`` or the making of the world), before the controller imports the
transport's own code; on the transports built on tcp's world, as it makes its world.
The server's imports (about 0.15 s of CPU for tcp) then run beside the controller's own
imports, its setting up and its program, not between its first ``spawn_procs`` and
its procs.

Environments are compared without the `VOLATILE` variables, which a test
runner changes for every test; a child is given the launcher's values of those.

``preload`` names modules the server imports as well (the job's ``preload``
option, else ``DANAUS_PRELOAD``), with the controller's ``sys.path``: what
workers would import anyway (``torch``, the program's own modules) is then
imported once, not once per proc. A module that fails to import is reported on
the server's stderr and left for each worker to import itself.

Two Unix sockets (``SOCK_SEQPACKET``, so each message is whole) join them, each
used by one thread of the launcher: on the first, its starter thread sends
``F`` and the child's `VOLATILE` values (JSON) with three descriptors to ask for
a child, and the server answers ``S``
with the child's pid (or -1 if it could not fork); on the second, read by its
I/O thread, the server sends ``E`` with a child's pid and exit code (negative
for a signal, as `subprocess` reports it) once it has reaped it.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import IO

from danaus.transports.tcp.allocator import proc_environment
from danaus.transports.tcp.bootstrap import search_path

SERVER_MODULE = "danaus.transports.tcp.forker"
FORK = b"F"
STARTED = b"S"
EXITED = b"E"
PID_MESSAGE = struct.Struct("<cq")
EXIT_MESSAGE = struct.Struct("<cqq")
PRELOAD = (
    "danaus.transports.tcp.worker",
    "danaus.transports.tcp.bootstrap",
    "danaus.transports.tcp.world",
    "danaus.transports.tcp.output",
)
"""What every worker imports before it serves its proc (the transport's own package too)."""
VOLATILE = frozenset({"PYTEST_CURRENT_TEST", "UCX_NET_DEVICES", "TORCHINDUCTOR_CACHE_DIR"})
"""Variables that change while a program runs and that no module reads when imported: pytest
sets the first for each test, the ucx transport the second for each job (the device of the
address it binds), which UCX reads only when a proc makes its context, and torch the third
when its compiler's configuration loads (as the tensor engine's first operator on meta tensors
makes it do), which torch reads only when it compiles. A server started under other values
still fits."""
MAX_REQUEST = 64 * 1024
"""Bytes of a request for a child, at most (its `VOLATILE` values)."""


def _imports(
    preload: Sequence[str], path: Sequence[str] | None = None
) -> tuple[tuple[str, ...], list[str]]:
    """What a server for ``preload`` imports besides `PRELOAD`, and from where (``path``, by
    default this process's; it matters only to preloads)."""
    if not preload:
        return (), []
    return tuple(preload), list(path) if path is not None else search_path()


def stable(environment: Mapping[str, str]) -> dict[str, str]:
    """``environment`` without its `VOLATILE` variables."""
    return {key: value for key, value in environment.items() if key not in VOLATILE}


def volatile_request(environment: Mapping[str, str]) -> bytes:
    """The request for a child that is to see ``environment``'s `VOLATILE` values."""
    values = {key: environment.get(key) for key in sorted(VOLATILE)}
    return FORK + json.dumps(values).encode()


class ForkServer:
    """The launcher's side: starts the server, asks it for children, hears of their ends.

    `fork` and `close` run on the launcher's starter thread; `read_exits` on
    its I/O thread, which watches `exits`.
    """

    def __init__(
        self, transport: str, preload: Sequence[str] = (), path: Sequence[str] | None = None
    ) -> None:
        """``path``: where the preloads are imported from (default: this process's path)."""
        self.transport = transport
        self.imports = _imports(preload, path)
        self.environment = stable(os.environ)
        """The environment the server, and so every child it forks, was started with
        (without its `VOLATILE` variables, which each child is given)."""
        requests, exits = (socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET) for _ in "ab")
        theirs = (requests[1].fileno(), exits[1].fileno())
        preloads, path = self.imports
        imports = json.dumps({"preload": preloads, "sys_path": path})
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-m", SERVER_MODULE, *map(str, theirs), transport, imports],
                env=proc_environment(self.environment),
                pass_fds=theirs,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
            )
        except BaseException:
            requests[0].close()
            exits[0].close()
            raise
        finally:
            requests[1].close()
            exits[1].close()
        self._requests = requests[0]
        self.exits = exits[0]
        """Where the server tells of each child's end; readable until the server ends."""

    def fits(self, environment: Mapping[str, str]) -> bool:
        """Whether a child of the server would see ``environment``."""
        return (
            stable(environment) == self.environment
            and len(volatile_request(environment)) <= MAX_REQUEST
        )

    def serves(self, transport: str, preload: Sequence[str]) -> bool:
        """Whether the server is one a launcher of ``transport`` with ``preload`` can use now."""
        return (
            self.transport == transport
            and self.imports == _imports(preload)
            and self.fits(os.environ)
        )

    def fork(self) -> tuple[int, IO[bytes], IO[bytes], IO[bytes]]:
        """A new child, with this process's `VOLATILE` values: its pid, its stdin to write,
        its stdout and stderr to read.

        Raises `OSError` if the server could not fork it or has ended.
        """
        pipes = [os.pipe() for _ in range(3)]
        theirs = [pipes[0][0], pipes[1][1], pipes[2][1]]
        ours = [pipes[0][1], pipes[1][0], pipes[2][0]]
        try:
            socket.send_fds(self._requests, [volatile_request(os.environ)], theirs)
            answer = self._requests.recv(PID_MESSAGE.size)
            pid = PID_MESSAGE.unpack(answer)[1] if len(answer) == PID_MESSAGE.size else -1
            if pid <= 0:
                raise OSError("the fork server could not start a process")
        except OSError:
            for fd in ours:
                os.close(fd)
            raise
        finally:
            for fd in theirs:
                os.close(fd)
        stdin, stdout, stderr = ours
        return pid, open(stdin, "wb"), open(stdout, "rb"), open(stderr, "rb")

    def read_exits(self, on_exit: Callable[[int, int], None]) -> bool:
        """Pass each reported end to ``on_exit(pid, code)``; False once the server has ended."""
        while True:
            try:
                message = self.exits.recv(EXIT_MESSAGE.size, socket.MSG_DONTWAIT)
            except BlockingIOError:
                return True
            except OSError:
                return False
            if len(message) != EXIT_MESSAGE.size:
                return False
            _, pid, code = EXIT_MESSAGE.unpack(message)
            on_exit(pid, code)

    def alive(self) -> bool:
        return self._process.poll() is None

    def close(self, timeout: float = 5.0) -> None:
        """End the server (and any child of it still running) and wait for it."""
        self._requests.close()
        try:
            self._process.wait(timeout)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()


IDLE_SERVERS = 2
"""Servers `POOL` keeps for later launchers; more are closed."""


class ForkServerPool:
    """Fork servers no launcher uses now, kept for the next one of this process. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: list[ForkServer] = []
        self._ahead = True
        """Whether `ahead` starts servers: not in a fork server, nor in the procs it forks."""

    def take(self, transport: str, preload: Sequence[str] = ()) -> ForkServer:
        """An idle server for ``transport``, ``preload`` and this environment, else a new one.

        Raises `OSError` if a new one cannot be started.
        """
        with self._lock:
            for server in self._idle:
                if server.serves(transport, preload):
                    self._idle.remove(server)
                    if server.alive():
                        return server
                    server.close()
                    break
        return ForkServer(transport, preload)

    def ahead(self, transport: str, preload: Sequence[str] = ()) -> None:
        """Start a server for ``transport``, ``preload`` and this environment now, unless an
        idle one serves them: the next launcher takes it with its imports done or under way.
        """
        with self._lock:
            if not self._ahead or any(server.serves(transport, preload) for server in self._idle):
                return
        try:
            self.give_back(ForkServer(transport, preload))
        except OSError:
            return  # the first launch tries again, and says why it cannot

    def no_servers_ahead(self) -> None:
        """Start no server ahead from now on: this process is a fork server. A module it
        preloads may call ``configure()``, which would otherwise start a server of its own,
        which would preload the module again, and so on."""
        with self._lock:
            self._ahead = False

    def give_back(self, server: ForkServer) -> None:
        """Keep ``server`` for a later launcher (its last one has no child of it left)."""
        with self._lock:
            self._idle.append(server)
            extra, self._idle = self._idle[:-IDLE_SERVERS], self._idle[-IDLE_SERVERS:]
        for old in extra:
            old.close()


POOL = ForkServerPool()
