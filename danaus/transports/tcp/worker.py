"""``python -m danaus.transports.tcp.worker``: a worker process, started by a launcher.

It reads its bootstrap from stdin, makes sure it dies with its launcher, and
serves its proc until told to exit. It imports nothing heavy: user code pulls
in torch or anything else only if it uses it. It imports what it needs before
reading its bootstrap, so a worker loop can start one ahead of time, ready for
the next controller (``--preload TRANSPORT`` imports that transport too).
"""

from __future__ import annotations

import contextlib
import ctypes
import faulthandler
import importlib
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


def main() -> None:
    from danaus.transports.tcp.bootstrap import Bootstrap, join_search_path
    from danaus.transports.tcp.world import worker_main

    preload = sys.argv[2] if len(sys.argv) == 3 and sys.argv[1] == "--preload" else None
    if preload in PRELOADABLE:
        importlib.import_module(f"danaus.transports.{preload}")
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
    output.install(boot.proc_id, boot.host if boot.remote else None)
    worker_main(boot, parent)


if __name__ == "__main__":
    main()
