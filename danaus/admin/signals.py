"""The job file goes when its controller is ended by SIGTERM or SIGINT.

The file holds the key to the admin socket, so it must not outlive the
controller. A controller that shuts down removes it; one ended by a signal
does not get that far (SIGTERM's default action ends the process at once), so
while the file exists a handler for SIGTERM and SIGINT removes it first, then
does what the signal would have done: it calls the handler installed before
(the user's, or Python's, which raises `KeyboardInterrupt` for SIGINT), or,
for the default action, restores it and sends the signal again. A signal the
process ignores is left ignored, and a handler the user installs later
replaces this one (the file then goes when the controller exits, or with the
tools' sweep of files whose controller is gone: `danaus.admin.jobfile`).
Handlers can only be set from the main thread; a controller made on another
thread removes its file at shutdown only.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from pathlib import Path
from types import FrameType
from typing import Any

SIGNALS = (signal.SIGTERM, signal.SIGINT)


class RemoveOnSignal:
    """While installed, SIGTERM and SIGINT remove ``path`` before they take their course."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._previous: dict[int, Any] = {}
        if threading.current_thread() is not threading.main_thread():
            return
        for signum in SIGNALS:
            previous = signal.getsignal(signum)
            if previous is signal.SIG_IGN or previous is None:
                continue  # ignored, or set outside Python: left as it is
            self._previous[signum] = previous
            signal.signal(signum, self._received)

    def _received(self, signum: int, frame: FrameType | None) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._path.unlink()
        previous = self._previous.get(signum, signal.SIG_DFL)
        self.uninstall()
        if callable(previous):
            previous(signum, frame)
        else:
            os.kill(os.getpid(), signum)  # the default action, now restored

    def uninstall(self) -> None:
        """Give each signal back the handler it had (where this one is still installed)."""
        if threading.current_thread() is not threading.main_thread():
            return
        previous, self._previous = self._previous, {}
        for signum, handler in previous.items():
            if signal.getsignal(signum) == self._received:
                signal.signal(signum, handler)
