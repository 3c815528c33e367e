"""``python -m danaus.transports.tcp.worker``: a worker process, started by a launcher.

It reads its bootstrap from stdin, makes sure it dies with its launcher, and
serves its proc until told to exit. It imports nothing heavy: user code pulls
in torch or anything else only if it uses it. It imports what it needs before
reading its bootstrap, so a worker loop can start one ahead of time, ready for
the next controller: ``--preload TRANSPORT [IMPORTS]`` imports that transport
too, and starts the fork server (`danaus.transports.tcp.forkserver`) that the
last controller's job had, with its ``preload`` and ``sys.path`` (``IMPORTS``,
JSON), so that the next job's first procs on this host are forked at once
instead of after the server's imports (a remote mesh of one tcp proc comes up
in about half the time). A job with other preloads gets a server of its own;
the early one then ends with the agent.
"""

from __future__ import annotations

import contextlib
import ctypes
import faulthandler
import importlib
import json
import logging
import os
import signal
import sys

PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Ask the kernel for SIGKILL when the thread that started this process ends."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _die_with_parent(parent_pid: int) -> int:
    """Die when the launcher (``parent_pid``) does; a pidfd of it, to watch.

    The kernel's parent-death signal covers a launcher that is this process's
    parent; a `BootstrapCommand` or the fork server may put a process in
    between, so the launcher's pidfd is watched as well.
    """
    die_with_parent()
    try:
        return os.pidfd_open(parent_pid)
    except ProcessLookupError:
        os._exit(70)


PRELOADABLE = ("tcp", "ucx")


def _start_fork_server(transport: str, imports: str | None) -> None:
    """Start a fork server for ``transport`` and ``imports`` now, kept for this agent's launcher."""
    from danaus.transports.tcp.bootstrap import joined_search_path
    from danaus.transports.tcp.forkserver import POOL, ForkServer

    wanted = json.loads(imports) if imports else {}
    preload, path = wanted.get("preload", []), wanted.get("sys_path", [])
    try:
        POOL.give_back(ForkServer(transport, preload, joined_search_path(path)))
    except OSError as exc:
        logging.getLogger("danaus.worker").warning("no fork server ahead of time: %s", exc)


def main() -> None:
    from danaus.transports.tcp.bootstrap import Bootstrap, join_search_path
    from danaus.transports.tcp.world import worker_main

    ahead = sys.argv[1:4] if sys.argv[1:2] == ["--preload"] else []
    if len(ahead) >= 2 and ahead[1] in PRELOADABLE:
        importlib.import_module(f"danaus.transports.{ahead[1]}")
        _start_fork_server(ahead[1], ahead[2] if len(ahead) == 3 else None)
    data = sys.stdin.buffer.read()
    if not data:
        return  # a worker started ahead of time whose worker loop ended first
    boot = Bootstrap.decode(data)
    parent = _die_with_parent(boot.parent_pid)
    if os.path.isdir(boot.cwd):
        os.chdir(boot.cwd)
    join_search_path(boot.sys_path)
    from danaus.transports.tcp import output

    # A proc killed by a fatal signal (a crash in native code) says where it was.
    faulthandler.enable(sys.__stderr__)
    output.install(boot.proc_id, boot.options.log_level, boot.host if boot.remote else None)
    worker_main(boot, parent)


if __name__ == "__main__":
    main()
