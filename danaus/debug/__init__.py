"""Remote debugging: ``breakpoint()`` in an actor stops that rank; `danaus debug` attaches.

See `danaus.debug.hook` for what stops, `danaus.debug.sessions` for the
controller's side, and `danaus.debug.repl` for the prompt people type at: in
another terminal (``danaus debug``), or in the controller's own with `attach`.
"""

from __future__ import annotations

import asyncio
import sys
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from danaus.admin import protocol


def attach(stdin: TextIO | None = None, stdout: TextIO | None = None) -> int:
    """Run the ``danaus debug>`` prompt here, in the controller, over its stopped ranks.

    For a program that starts calls, then debugs them itself::

        pending = trainers.step.call()
        danaus.debug.attach()      # list, attach N, continue...
        pending.get()

    Only on a real transport (on the simulator, ``breakpoint()`` is plain pdb).
    """
    from danaus.core import config
    from danaus.debug.repl import DebugRepl

    world = config.current_world()
    admin = getattr(world, "admin", None)
    if admin is None:
        raise RuntimeError(f"the {world.name} transport has no remote debugger")

    class Here:
        def ask(self, request: protocol.Request, timeout: float | None = None) -> Any:
            answer = asyncio.run_coroutine_threadsafe(admin.answer(request), world.loop)
            return answer.result(timeout)

    return DebugRepl(Here(), stdin or sys.stdin, stdout or sys.stdout).run()
