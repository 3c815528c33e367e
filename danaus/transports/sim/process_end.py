"""A simulated proc whose code ends its own process ends only itself.

Every proc of a simulated world runs in one OS process, the controller's, so
``os._exit(1)`` or ``os.kill(os.getpid(), signal.SIGKILL)`` in an actor would
end them all, and a test session with them. While a simulated world lives,
the functions by which a process ends itself are replaced. Called by an
actor of one of its simulated procs, they end that proc alone, and its loss
reads as a real transport reports it:

* ``os._exit(n)``: the proc exits with code ``n`` (``Exited(code=n)``);
* ``os.abort()``: the proc is killed by SIGABRT;
* ``os.kill(os.getpid(), sig)`` and ``signal.raise_signal(sig)``: ``sig`` does
  what it does to a Danaus worker process, whose signals keep their default
  actions (`action`). A signal that terminates a process by default (SIGKILL,
  SIGTERM, SIGSEGV, SIGUSR1...) kills the proc (``Killed(sig=9)``); one
  ignored by default (SIGCHLD, SIGURG, SIGWINCH, SIGCONT), or ignored by every
  Python process (SIGPIPE, SIGXFSZ), does nothing; one that stops a process
  (SIGSTOP, SIGTSTP, SIGTTIN, SIGTTOU) pauses the proc as the ``pause`` fault
  does, and the caller waits until the proc is resumed or, silent for the
  heartbeat timeout, declared lost. Signal 0 checks that the proc exists: it
  does.

The caller's code does not go on: it unwinds with `ProcEnded` (an
`asyncio.CancelledError`, as the proc's other tasks get). Its ``finally``
blocks run, unlike in a real process, but the proc is down by then and
nothing they send leaves it.

Called anywhere else (the controller's own code, an actor of the
controller's proc, another thread, or with another process's pid), they are
the standard functions: the controller's process ends, as on a real
transport. Each replacement finds the world of the actor that calls it (the
only code that runs as a simulated proc is an actor's, and only while its
world's loop runs), so two worlds in one process never see each other's
procs. The replacements are in place from the start of the first live world
to the shutdown of the last, as the waits of `outside_waits` are: putting
them in place each time a loop starts to run would cost every blocking wait
of the controller's code, and change nothing a program sees.
"""

from __future__ import annotations

import asyncio
import errno
import os
import signal
import threading
from typing import TYPE_CHECKING, Any, NoReturn

from danaus.core.context import peek_context
from danaus.core.transport import ROOT
from danaus.transports.sim import outside_waits
from danaus.transports.sim.network import ProcState

if TYPE_CHECKING:
    from danaus.transports.sim.world import SimWorld


class ProcEnded(asyncio.CancelledError):
    """What the code of a simulated proc that ended its own process unwinds with."""


def _named(*names: str) -> frozenset[int]:
    """The numbers of the signals called ``names`` that this platform has."""
    return frozenset(int(getattr(signal, name)) for name in names if hasattr(signal, name))


IGNORED = _named("SIGCHLD", "SIGCLD", "SIGURG", "SIGWINCH", "SIGCONT", "SIGPIPE", "SIGXFSZ")
"""Signals a Danaus proc ignores: by default (SIGCONT resumes a process that runs anyway),
or because Python ignores them in every process it starts (SIGPIPE, SIGXFSZ)."""

STOPPING = _named("SIGSTOP", "SIGTSTP", "SIGTTIN", "SIGTTOU")
"""Signals that stop a process until it is continued."""

_standard: dict[str, Any] = {}
"""The functions replaced while a world lives, as they were before."""

_worlds: list[SimWorld] = []
"""The live simulated worlds of this process, oldest first."""


def action(sig: int) -> str:
    """What ``sig`` does to a Danaus proc: ``"ignore"``, ``"stop"`` or ``"terminate"``."""
    if sig in IGNORED:
        return "ignore"
    if sig in STOPPING:
        return "stop"
    return "terminate"


def attach(world: SimWorld) -> None:
    """``world`` starts: from now on its actors end only their procs."""
    if not _worlds:
        _install()
    _worlds.append(world)


def detach(world: SimWorld) -> None:
    """``world`` has shut down; with the last one, the standard functions come back."""
    if world in _worlds:
        _worlds.remove(world)
    if not _worlds:
        _restore()


def _install() -> None:
    if os._exit is not _exit:
        _standard.update(
            _exit=os._exit, kill=os.kill, abort=os.abort, raise_signal=signal.raise_signal
        )
    os._exit = _exit
    os.kill = _kill
    os.abort = _abort
    signal.raise_signal = _raise_signal


def _restore() -> None:
    if not _standard:
        return
    os._exit = _standard["_exit"]
    os.kill = _standard["kill"]
    os.abort = _standard["abort"]
    signal.raise_signal = _standard["raise_signal"]


def _caller() -> tuple[SimWorld, str] | None:
    """The running world and simulated proc of the actor calling, or None if it is none."""
    ctx = peek_context()
    if ctx is None:
        return None
    runtime = ctx.actor_instance._runtime
    world: Any = runtime.world
    if world not in _worlds or world.thread != threading.get_ident() or runtime.proc_id == ROOT:
        return None
    return world, runtime.proc_id


def _end(world: SimWorld, proc: str, call: str, reason: str, **details: int) -> NoReturn:
    world.crash(proc, reason, **details)
    raise ProcEnded(f"simulated proc {proc} ended its process: {call}")


def _exit(code: int) -> NoReturn:
    """``os._exit`` (see the module docstring)."""
    caller = _caller()
    if caller is None:
        return _standard["_exit"](code)  # type: ignore[no-any-return]
    _end(*caller, f"os._exit({code})", "exited", exit_code=int(code))


def _abort() -> NoReturn:
    """``os.abort`` (see the module docstring)."""
    caller = _caller()
    if caller is None:
        return _standard["abort"]()  # type: ignore[no-any-return]
    _end(*caller, "os.abort()", "was killed", signal=int(signal.SIGABRT))


def _kill(pid: int, sig: int) -> None:
    """``os.kill`` (see the module docstring)."""
    caller = _caller() if pid == os.getpid() else None
    if caller is None:
        _standard["kill"](pid, sig)
        return
    _signalled(*caller, int(sig), f"os.kill(os.getpid(), {sig!r})")


def _raise_signal(sig: int) -> None:
    """``signal.raise_signal`` (see the module docstring)."""
    caller = _caller()
    if caller is None:
        _standard["raise_signal"](sig)
        return
    _signalled(*caller, int(sig), f"signal.raise_signal({sig!r})")


def _signalled(world: SimWorld, proc: str, sig: int, call: str) -> None:
    """Simulated proc ``proc`` of ``world`` sent itself signal ``sig``."""
    if not 0 <= sig < signal.NSIG:
        raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
    what = action(sig)
    if sig == 0 or what == "ignore":
        return
    if what == "terminate":
        _end(world, proc, call, "was killed", signal=sig)
    endpoint = world.network.endpoints[proc]
    world.faults.pause(proc)
    outside_waits.wait_until(world, lambda: endpoint.state is not ProcState.PAUSED, None)
    if endpoint.state is ProcState.DOWN:
        raise ProcEnded(f"simulated proc {proc} was lost while stopped by {call}")
