"""Waiting for what happens outside this process (a file, a process's end, a scheduler's
state): asking again at an interval until it holds or a deadline passes, with tenacity."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import tenacity

T = TypeVar("T")


def poll(check: Callable[[], T], *, every: float, timeout: float | None) -> T:
    """``check()`` now and every ``every`` seconds until it returns a true value, which is
    returned; its last (false) value once ``timeout`` seconds have passed (None: no limit).
    An exception of ``check`` ends the wait."""
    retrying = tenacity.Retrying(
        retry=tenacity.retry_if_result(lambda value: not value),
        wait=tenacity.wait_fixed(every),
        stop=tenacity.stop_never if timeout is None else tenacity.stop_after_delay(timeout),
        retry_error_callback=lambda state: state.outcome.result() if state.outcome else None,
    )
    return retrying(check)
