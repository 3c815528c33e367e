"""``python -m danaus.transports.tcp.forker``: the fork server's process (see
`danaus.transports.tcp.forkserver`, the launcher's side).

It imports what every worker imports and the job's preloads, then forks a child
per request, which becomes a worker; it reaps them and reports their ends.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import selectors
import socket
import sys

from danaus.transports.tcp.bootstrap import join_search_path
from danaus.transports.tcp.forkserver import (
    EXIT_MESSAGE,
    EXITED,
    FORK,
    MAX_REQUEST,
    PID_MESSAGE,
    POOL,
    PRELOAD,
    STARTED,
    VOLATILE,
)


def _serve(requests: socket.socket, exits: socket.socket) -> tuple[list[int], bytes] | None:
    """Fork a child per request until the launcher hangs up; in a child, its stdio descriptors
    and the `VOLATILE` values it is to see (JSON)."""
    selector = selectors.DefaultSelector()
    selector.register(requests, selectors.EVENT_READ)
    children: dict[int, int] = {}
    while True:
        for key, _ in selector.select():
            if key.fileobj is not requests:
                pid = children.pop(key.fd)
                selector.unregister(key.fd)
                os.close(key.fd)
                _, status = os.waitpid(pid, 0)
                exits.send(EXIT_MESSAGE.pack(EXITED, pid, os.waitstatus_to_exitcode(status)))
                continue
            try:
                message, fds, _, _ = socket.recv_fds(requests, MAX_REQUEST, 3)
            except OSError:
                message, fds = b"", []
            if message[:1] != FORK or len(fds) != 3:
                return None
            try:
                pid = os.fork()
            except OSError:
                pid = -1
            if pid == 0:
                selector.close()
                requests.close()
                exits.close()
                for pidfd in children:
                    os.close(pidfd)
                return fds, message[1:]
            for fd in fds:
                os.close(fd)
            if pid > 0:
                pidfd = os.pidfd_open(pid)
                children[pidfd] = pid
                selector.register(pidfd, selectors.EVENT_READ)
            requests.send(PID_MESSAGE.pack(STARTED, pid))


def _become_worker(stdio: list[int], volatile: bytes) -> None:
    """In a forked child: take the launcher's pipes as stdio and its `VOLATILE` values, and
    run the worker."""
    values = json.loads(volatile)
    for name in VOLATILE:
        value = values.get(name)
        if isinstance(value, str):
            os.environ[name] = value
        else:
            os.environ.pop(name, None)
    for target, fd in enumerate(stdio):
        os.dup2(fd, target)
        os.close(fd)
    worker = sys.modules[PRELOAD[0]]
    sys.argv = [worker.__file__ or PRELOAD[0]]
    worker.main()


def _preload(names: list[str], path: list[str]) -> None:
    """Import the job's preloads with the controller's ``sys.path``; a failure is only told."""
    join_search_path(path)
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as exc:  # whatever a module raises, its workers will meet it themselves
            print(
                f"danaus: the fork server could not preload {name} ({exc!r}); "
                "each proc imports it itself",
                file=sys.stderr,
                flush=True,
            )


def main() -> None:
    requests, exits = (socket.socket(fileno=int(fd)) for fd in sys.argv[1:3])
    transport = sys.argv[3]
    POOL.no_servers_ahead()
    for name in (*PRELOAD, f"danaus.transports.{transport}"):
        importlib.import_module(name)
    imports = json.loads(sys.argv[4])
    _preload(imports["preload"], imports["sys_path"])
    # What the imports made lives as long as every child: the children's collections,
    # and the one that ends each child's interpreter, skip it instead of walking (and
    # copying, page by page) the whole of it.
    gc.freeze()
    child = _serve(requests, exits)
    if child is not None:
        _become_worker(*child)


if __name__ == "__main__":
    main()
