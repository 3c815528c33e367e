"""``python -m danaus.transports.tcp.worker``: a worker process, started by a launcher.

It reads its bootstrap from stdin, makes sure it dies with its parent, and
serves its proc until told to exit. It imports nothing heavy: user code pulls
in torch or anything else only if it uses it.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1


def _die_with_parent(parent_pid: int) -> None:
    """Ask the kernel to kill this process when its parent dies (Linux)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent_pid:
        os._exit(70)


def main() -> None:
    from danaus.transports.tcp.bootstrap import Bootstrap

    boot = Bootstrap.decode(sys.stdin.buffer.read())
    _die_with_parent(boot.parent_pid)
    os.chdir(boot.cwd)
    sys.path[:0] = [p for p in boot.sys_path if p not in sys.path]
    from danaus.transports.tcp import output

    output.install(boot.proc_id)
    from danaus.transports.tcp.world import worker_main

    worker_main(boot)


if __name__ == "__main__":
    main()
