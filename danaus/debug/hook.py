"""``breakpoint()`` in an actor on a real transport: the rank stops, `danaus debug` attaches.

Each user actor has a thread of its own on real transports, so a pdb that
blocks it stops that actor alone; its proc keeps serving the others, answering
heartbeats and carrying the debugger's own messages. The pdb's input and
output travel to the controller (`danaus.debug.sessions`) as calls to its
agent; a person types at `danaus debug`, in any terminal of the job's user.

Elsewhere ``breakpoint()`` is Python's own: in the controller's main code, on
the simulator (one process, one terminal: plain pdb), and whenever
``PYTHONBREAKPOINT`` is set.
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

from danaus.core import config
from danaus.core.context import peek_context
from danaus.core.instance import Instance, InstanceKind


def install() -> None:
    """Route ``breakpoint()`` here in this process, unless the program has its own hook."""
    if sys.breakpointhook is sys.__breakpointhook__:
        sys.breakpointhook = breakpoint_hook


def breakpoint_hook(*args: Any, **kwargs: Any) -> Any:
    """Stop the calling actor for `danaus debug`; anything else gets Python's own hook."""
    instance = _stoppable_actor()
    if instance is None or os.environ.get("PYTHONBREAKPOINT"):
        return sys.__breakpointhook__(*args, **kwargs)
    from danaus.debug.rank import RankDebugger

    frame = sys._getframe(1)
    RankDebugger(instance, frame).set_trace(frame)
    return None


def _stoppable_actor() -> Instance | None:
    """The user actor running here, if a remote debugger can stop it without stopping others."""
    world = config.installed()
    context = peek_context()
    if world is None or world.deterministic or context is None:
        return None
    instance = context.actor_instance
    if instance.kind is not InstanceKind.USER or asyncio._get_running_loop() is world.loop:
        return None
    return instance
