"""What a controller prints as it ends comes out whole, and not mixed up.

A controller that a failure reaches unhandled prints its report and ends at once
(a world's ``abort``), from the thread that learnt of the failure. Its main
thread may be printing the traceback of the same failure at that moment, since
the call it waited on failed too: the two came out interleaved, and ending cut
the traceback mid-frame. So the report, and uncaught exceptions of any thread
(once `install` ran), are printed holding one lock (`printing`), and flushed
before it is let go; a world takes it (`ending`) before it ends the process.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator
from typing import Any

_printing = threading.RLock()
_installed = False


def install() -> None:
    """Print every uncaught exception holding the lock `ending` takes (once per process)."""
    global _installed
    if _installed:
        return
    _installed = True
    print_uncaught = sys.excepthook
    print_thread_uncaught = threading.excepthook

    def excepthook(*args: Any) -> None:
        with printing():
            print_uncaught(*args)

    def thread_excepthook(args: Any) -> None:
        with printing():
            print_thread_uncaught(args)

    sys.excepthook = excepthook
    threading.excepthook = thread_excepthook


@contextlib.contextmanager
def printing() -> Iterator[None]:
    """Hold while printing last words: no other last words come out in between; flushed."""
    with _printing:
        try:
            yield
        finally:
            flush()


ending = printing
"""Hold while the process ends: last words being printed are printed to their end first."""


def flush() -> None:
    """Flush this process's stdout and stderr, whatever they are now."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
