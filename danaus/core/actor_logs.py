"""Python log records made by an actor's code name the actor, as Monarch's do.

``logging.getLogger(__name__).info("loss %s", loss)`` in an endpoint logs
``[actor=<root>.<train.Trainer trainers{'gpus': 3/8}>] loss 0.25`` (the actor's
`qualified_name`), and in the controller's own code ``[actor=<root>] ...``.
The name goes into the record's message when the record is made, so that every
handler shows it, the program's own included. An actor's ``self.logger``
(``danaus.actor.<Class>``) is the actor's own; records of Danaus's own loggers,
which name their actor themselves, and records with an empty message (torch's
structured logs), are left as they are. Setting
``danaus.config.prefix_python_logs_with_actor = False`` stops it in the process
where it is set.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from danaus.core import config
from danaus.core.context import peek_context
from danaus.core.transport import ROOT


class Settings:
    """``danaus.config``: settings of the process that sets them (Monarch's
    ``monarch.actor.config``; `danaus.configure` takes those of the transport)."""

    prefix_python_logs_with_actor: bool = True
    """Whether log records made in an actor begin with its name (see `danaus.core.actor_logs`)."""

    def __repr__(self) -> str:
        return f"danaus.config(prefix_python_logs_with_actor={self.prefix_python_logs_with_actor})"


settings = Settings()

ACTOR_LOGGERS = "danaus.actor."
"""The prefix of the loggers of actors' ``self.logger`` (`Actor.logger`)."""

_installed = threading.Lock()
"""Held once the record factory is in place: it wraps the one found, once per process."""


def install() -> None:
    """Name actors in the log records made in this process from now on (once)."""
    if not _installed.acquire(blocking=False):
        return
    made = logging.getLogRecordFactory()

    def make_record(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = made(*args, **kwargs)
        if settings.prefix_python_logs_with_actor and record.msg:
            speaker = None if _danaus_own(record.name) else _speaker()
            if speaker is not None:
                prefix = f"[actor={speaker}] "
                record.msg = f"{prefix.replace('%', '%%') if record.args else prefix}{record.msg}"
        return record

    logging.setLogRecordFactory(make_record)


def _danaus_own(logger: str) -> bool:
    """Whether ``logger`` is one of Danaus's own (not an actor's ``self.logger``)."""
    return logger.startswith("danaus") and not logger.startswith(ACTOR_LOGGERS)


def _speaker() -> str | None:
    """The actor whose code makes a record now: an actor's, or the controller's own code
    (on its main thread); None for any other code."""
    ctx = peek_context()
    if ctx is not None:
        return str(ctx.actor_instance)
    if threading.current_thread() is not threading.main_thread():
        return None
    world = config.installed()
    return "<root>" if world is not None and world.is_local(ROOT) else None
