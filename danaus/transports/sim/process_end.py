"""A simulated proc is a process of its own to code: its own pid, and its own end.

Every proc of a simulated world runs in one OS process, the controller's, so
``os.getpid()`` would be the same in all of them, and ``os._exit(1)`` or
``os.kill(pid, signal.SIGKILL)`` in an actor would end them all, and a test
session with them. While a simulated world lives, these functions are
replaced. Called by an actor of one of its simulated procs:

* ``os.getpid()`` is the proc's own pid (`SimWorld.pid_of`): a number above
  any pid Linux gives (``PID_MAX_LIMIT``, 2**22), so that no real process has
  it, given to each proc as it boots, in order;
* ``os._exit(n)`` ends the proc: it exited with code ``n`` (``Exited(code=n)``),
  as a real transport reports it;
* ``os.abort()`` ends it, killed by SIGABRT;
* ``os.kill(pid, sig)`` with its own pid, or ``signal.raise_signal(sig)``:
  ``sig`` does what it does to a Danaus worker process, whose signals keep
  their default actions (`action`). A signal that terminates a process by
  default (SIGKILL, SIGTERM, SIGSEGV, SIGUSR1...) kills the proc
  (``Killed(sig=9)``); one ignored by default (SIGCHLD, SIGURG, SIGWINCH,
  SIGCONT), or ignored by every Python process (SIGPIPE, SIGXFSZ), does
  nothing; one that stops a process (SIGSTOP, SIGTSTP, SIGTTIN, SIGTTOU)
  pauses the proc as the ``pause`` fault does, and the caller waits until the
  proc is resumed or, silent for the heartbeat timeout, declared lost.
  Signal 0 checks that the proc lives: it does.

A proc's bootstrap function (``spawn_procs(bootstrap=...)``) runs as that proc.

The caller's code does not go on: it unwinds with `ProcEnded` (an
`asyncio.CancelledError`, as the proc's other tasks get). Its ``finally``
blocks run, unlike in a real process, but the proc is down by then and
nothing they send leaves it.

``os.kill`` with the pid of another simulated proc, from any code of the
world's thread (an actor, or the controller's), does the same to that proc,
and the caller goes on; signal 0 raises `ProcessLookupError` once the proc is
gone, as for a process that has ended.

Called anywhere else (the controller's own code, an actor of the
controller's proc, another thread, or with a real process's pid), they are the
standard functions: the controller's process ends, as on a real transport.
Each replacement finds the world of the actor that calls it, or the world a
pid belongs to, so two worlds in one process never see each other's procs. The
replacements are in place from the start of the first live world to the
shutdown of the last, as the waits of `outside_waits` are: putting them in
place each time a loop starts to run would cost every blocking wait of the
controller's code, and change nothing a program sees.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import signal
import threading
from collections.abc import Iterator
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, NoReturn

from danaus.core import config
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
            _exit=os._exit,
            kill=os.kill,
            abort=os.abort,
            getpid=os.getpid,
            raise_signal=signal.raise_signal,
        )
    os._exit = _exit
    os.kill = _kill
    os.abort = _abort
    os.getpid = _getpid
    signal.raise_signal = _raise_signal


def _restore() -> None:
    if not _standard:
        return
    os._exit = _standard["_exit"]
    os.kill = _standard["kill"]
    os.abort = _standard["abort"]
    os.getpid = _standard["getpid"]
    signal.raise_signal = _standard["raise_signal"]


_bootstrapping: ContextVar[tuple[SimWorld, str] | None] = ContextVar(
    "danaus_sim_bootstrapping", default=None
)
"""The world and proc whose ``spawn_procs(bootstrap=...)`` function runs now (`running_as`)."""


@contextlib.contextmanager
def running_as(world: SimWorld, proc: str) -> Iterator[None]:
    """Code run meanwhile (a proc's bootstrap function) runs as simulated proc ``proc``."""
    token = _bootstrapping.set((world, proc))
    try:
        yield
    finally:
        _bootstrapping.reset(token)


def running_proc() -> tuple[SimWorld, str] | None:
    """The running world and simulated proc of the code calling, or None if it is none: an
    actor's, or a proc's bootstrap function."""
    bootstrapping = _bootstrapping.get()
    if bootstrapping is not None:
        return bootstrapping
    ctx = peek_context()
    if ctx is None:
        return None
    runtime = ctx.actor_instance.runtime
    world: Any = runtime.world
    if world not in _worlds or world.thread != threading.get_ident() or runtime.proc_id == ROOT:
        return None
    return world, runtime.proc_id


def _end(world: SimWorld, proc: str, call: str, reason: str, **details: int) -> NoReturn:
    world.crash(proc, reason, **details)
    raise ProcEnded(f"simulated proc {proc} ended its process: {call}")


def _exit(code: int) -> NoReturn:
    """``os._exit`` (see the module docstring)."""
    caller = running_proc()
    if caller is None:
        return _standard["_exit"](code)  # type: ignore[no-any-return]
    _end(*caller, f"os._exit({code})", "exited", exit_code=int(code))


def _abort() -> NoReturn:
    """``os.abort`` (see the module docstring)."""
    caller = running_proc()
    if caller is None:
        return _standard["abort"]()  # type: ignore[no-any-return]
    _end(*caller, "os.abort()", "was killed", signal=int(signal.SIGABRT))


def _getpid() -> int:
    """``os.getpid`` (see the module docstring)."""
    caller = running_proc()
    if caller is None:
        return _standard["getpid"]()  # type: ignore[no-any-return]
    world, proc = caller
    return world.pid_of(proc)


def _world_here(caller: tuple[SimWorld, str] | None) -> SimWorld | None:
    """The world whose pids code here means: its actor's, or for other code on a world's
    thread, the current world (each world numbers its procs from `FIRST_PID`)."""
    if caller is not None:
        return caller[0]
    world: Any = config.installed()
    if world in _worlds and world.thread == threading.get_ident():
        return world
    return None


def _kill(pid: int, sig: int) -> None:
    """``os.kill`` (see the module docstring)."""
    caller = running_proc()
    world = _world_here(caller)
    proc = world.proc_of_pid(pid) if world is not None and isinstance(pid, int) else None
    if world is None or proc is None:
        _standard["kill"](pid, sig)
        return
    call = f"os.kill({pid}, {sig!r})"
    if caller == (world, proc):
        _signalled(world, proc, int(sig), call)
    else:
        _signal(world, proc, int(sig), call)


def _raise_signal(sig: int) -> None:
    """``signal.raise_signal`` (see the module docstring)."""
    caller = running_proc()
    if caller is None:
        _standard["raise_signal"](sig)
        return
    _signalled(*caller, int(sig), f"signal.raise_signal({sig!r})")


def _check_signal(sig: int) -> None:
    if not 0 <= sig < signal.NSIG:
        raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))


def _signal(world: SimWorld, proc: str, sig: int, call: str) -> None:
    """Signal ``sig`` sent to simulated proc ``proc`` of ``world`` from outside it."""
    _check_signal(sig)
    endpoint = world.network.endpoints.get(proc)
    if endpoint is None or endpoint.state is ProcState.DOWN:
        raise ProcessLookupError(errno.ESRCH, f"{os.strerror(errno.ESRCH)}: {call}")
    what = action(sig)
    if sig == 0:
        return
    if what == "terminate":
        world.crash(proc, "was killed", signal=sig)
    elif what == "stop":
        world.faults.pause(proc)
    elif sig == signal.SIGCONT:
        world.faults.resume(proc)


def _signalled(world: SimWorld, proc: str, sig: int, call: str) -> None:
    """Simulated proc ``proc`` of ``world`` sent itself signal ``sig``."""
    _check_signal(sig)
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
