"""Worker output: every line a worker prints is prefixed with who printed it.

A worker's stdout and stderr become line-buffered streams that prefix each
line with the actor mesh and rank of the code that wrote it (``[trainers
gpus=3]``), or with the proc for code outside any actor; on another host than
the controller's, with that host's name first (``[node2 trainers hosts=2
gpus=3]``). The controller copies the lines to its own terminal (from another
host, its host agent sends them), so the prefix says where each came from.
"""

from __future__ import annotations

import io
import logging
import sys
import threading
from typing import TextIO

from danaus.core.context import peek_context
from danaus.core.instance import InstanceKind


def actor_label() -> str | None:
    """``mesh coords`` of the user actor running here, or None."""
    ctx = peek_context()
    if ctx is None:
        return None
    instance = ctx.actor_instance
    if instance.kind is not InstanceKind.USER:
        return None
    coords = " ".join(f"{k}={v}" for k, v in instance.rank.items())
    return f"{instance.name} {coords}".rstrip()


class PrefixedStream(io.TextIOBase):
    """A text stream that writes whole lines, each with a prefix, to ``raw``."""

    def __init__(self, raw: TextIO, fallback: str, host: str | None = None) -> None:
        self._raw = raw
        self._fallback = fallback
        self._host = f"{host} " if host else ""
        self._lock = threading.Lock()
        self._partial = threading.local()

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        pending = getattr(self._partial, "text", "") + text
        *lines, rest = pending.split("\n")
        self._partial.text = rest
        if lines:
            prefix = f"[{self._host}{actor_label() or self._fallback}] "
            out = "".join(f"{prefix}{line}\n" for line in lines)
            with self._lock:
                self._raw.write(out)
                self._raw.flush()
        return len(text)

    def flush(self) -> None:
        rest = getattr(self._partial, "text", "")
        if rest:
            self._partial.text = ""
            self.write(rest + "\n")
        with self._lock:
            self._raw.flush()

    def fileno(self) -> int:
        return self._raw.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return self._raw.encoding


def install(proc_id: str, level: str, host: str | None = None) -> None:
    """Prefix this process's stdout, stderr and Python logging (with ``host``'s name, if given);
    log from ``level`` (the job's ``log_level``) up."""
    fallback = f"proc {proc_id}"
    sys.stdout = PrefixedStream(sys.__stdout__, fallback, host)
    sys.stderr = PrefixedStream(sys.__stderr__, fallback, host)
    _prefix_handlers({id(sys.__stdout__): sys.stdout, id(sys.__stderr__): sys.stderr})
    logging.basicConfig(
        stream=sys.stderr,
        level=level,
        format="%(levelname)s %(name)s: %(message)s",
        force=True,
    )


def _prefix_handlers(replacements: dict[int, TextIO]) -> None:
    """Point the stream handlers that modules made on import (before `install`: a fork
    server imports them first) at the prefixed streams, by the id of the stream they held."""
    loggers = [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]
    for logger in loggers:
        for handler in getattr(logger, "handlers", ()):
            if isinstance(handler, logging.StreamHandler):
                stream = replacements.get(id(handler.stream))
                if stream is not None:
                    handler.setStream(stream)
