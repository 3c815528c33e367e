"""What the caller of an endpoint that raised is told: the exception, its chain, and a
traceback that starts at the user's code."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import traceback

from danaus.core.errors import CAUSE, CONTEXT, ActorError, chain_link
from danaus.core.serialize import Buffer, dumps

_DANAUS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_DISPATCH_DIRS = (
    _DANAUS_DIR,
    os.path.dirname(asyncio.__file__),
    os.path.dirname(concurrent.futures.__file__),
)
"""Where the frames that dispatch a call to user code live (Danaus, asyncio, thread pools)."""

_LINKS = {
    CAUSE: "\nThe above exception was the direct cause of the following exception:\n\n",
    CONTEXT: "\nDuring handling of the above exception, another exception occurred:\n\n",
}


def _one_traceback(exc: BaseException) -> str:
    """One exception's traceback, from its first frame of user code (all of it if none)."""
    frames = traceback.extract_tb(exc.__traceback__)
    first_user = next(
        (i for i, f in enumerate(frames) if not f.filename.startswith(_DISPATCH_DIRS)), 0
    )
    lines = ["Traceback (most recent call last):\n"] if frames else []
    lines += traceback.format_list(frames[first_user:])
    lines += traceback.format_exception_only(type(exc), exc)
    return "".join(lines)


def remote_traceback(exc: BaseException) -> str:
    """The traceback of ``exc`` and the exceptions it chains to, as Python prints them."""
    parts: list[str] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        link, following = chain_link(current)
        parts.append(_one_traceback(current))
        if following is not None and link is not None:
            parts.append(_LINKS[link])
        current = following
    return "".join(reversed(parts))


def actor_error_payload(actor_id: str, exc: BaseException, call: str) -> list[Buffer]:
    """A pickled `ActorError` for ``exc`` and its chain, raised by the call ``call``
    (``mesh.endpoint``)."""
    return dumps(ActorError(actor_id, exc, remote_traceback(exc), call))


def describe(exc: BaseException) -> str:
    """``exc`` in one line, as failure causes name it: ``Type: message``."""
    return f"{type(exc).__name__}: {exc}"
