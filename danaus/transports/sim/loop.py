"""An asyncio event loop whose clock is the simulation's virtual time.

The loop owns a queue of ready callbacks and a heap of timers. When nothing is
ready, instead of waiting for I/O it advances the simulation's `Timeline`: it
processes simulation events (message deliveries, faults) up to the next timer,
and stops early as soon as one of them schedules a callback. So
``await asyncio.sleep(5)`` takes five simulated seconds and no real time, and
timers and network events interleave in one deterministic order.

One iteration follows the order of asyncio's own loops, so that a program
replays the same on this loop as it did on earlier versions of it:

1. drop cancelled timers from the head of the heap (or, when more than half of
   over 100 timers are cancelled, rebuild the heap without them);
2. if no callback is ready and the loop is not stopping, advance the
   simulation: process every simulation event up to the first timer's time (at most
   a day ahead), returning as soon as an event has made a callback ready (or
   the condition of a watch hold), and otherwise move the clock to that time;
3. move the timers due by now (within the monotonic clock's resolution, as
   asyncio does) to the ready queue, in heap order;
4. run the callbacks that were ready when this step began; callbacks they
   schedule run in the next iteration. A ``schedule`` (a `Schedule`), when
   set, first picks the order in which they run and which of them wait for
   the next iteration;
5. tell the watches whose condition now holds (see `watch`).

Code that blocks inside a callback can run the loop on (`run_nested`): a
blocking wait outside Danaus, such as ``time.sleep`` in async code, lets the
rest of the simulated world go on meanwhile, as it would on a real cluster.
A thread that stops (`hold_back`) is the same from outside: its callbacks
wait, the others run.

When the loop would wait with no timer and no simulation event left, nothing
can ever happen again: it raises `SimulationStalled` instead of hanging. Past
``time_limit`` it raises `SimulationTimeLimit`. Threads, I/O and signals do not
exist in virtual time: the methods for them raise `NotImplementedError`.
"""

from __future__ import annotations

import asyncio
import contextvars
import heapq
import logging
import math
import os
import sys
import time
import traceback
import warnings
import weakref
from collections import deque
from collections.abc import Callable, Coroutine, Generator
from typing import Any, Protocol, TypeVar

import msgspec

from danaus.transports.sim.timeline import Timeline

T = TypeVar("T")
ExceptionHandler = Callable[[asyncio.AbstractEventLoop, dict[str, Any]], Any]

logger = logging.getLogger("asyncio")
"""Unhandled errors are logged where asyncio's own loops log them."""

_MAX_WAIT = 24 * 3600.0
"""asyncio's loops wait at most a day at a time; the clock stops at that mark as it did there."""

_DUE_WINDOW = time.get_clock_info("monotonic").resolution
"""A timer this close to now counts as due (asyncio's rule, kept for identical replays)."""

_MIN_TIMERS_TO_PURGE = 100
_MAX_CANCELLED_FRACTION = 0.5
"""The heap is rebuilt without its cancelled timers when it holds more than
``_MIN_TIMERS_TO_PURGE`` of which more than this fraction are cancelled (asyncio's rule)."""

_STALLED = (
    "the simulation has nothing left to do but the program is still waiting: "
    "a call that can never be answered, or a thread (threads do not run on sim)"
)


class SimulationStalled(RuntimeError):
    """The simulated program waits for something that can never happen (a deadlock)."""


class SimulationTimeLimit(RuntimeError):
    """The simulation ran past its time limit (a livelock, or a workload that never ends)."""


class Handle(msgspec.Struct, eq=False):
    """A callback queued on the loop; ``cancel()`` keeps it from running.

    A struct, built in C: the loop makes one for every callback it runs. Compared
    by identity.
    """

    _callback: Callable[..., Any] | None
    _args: tuple[Any, ...] | None
    _context: contextvars.Context
    _cancelled: bool = False

    def cancel(self) -> None:
        """Do not run the callback; drop it and its arguments now."""
        self._cancelled = True
        self._callback = None
        self._args = None

    def cancelled(self) -> bool:
        return self._cancelled

    def get_context(self) -> contextvars.Context:
        return self._context

    def __repr__(self) -> str:
        state = " cancelled" if self._cancelled else f" {_describe(self._callback, self._args)}"
        return f"<{type(self).__name__}{state}>"


class TimerHandle(Handle, kw_only=True):
    """A callback due at a virtual time, ``when()``."""

    _when: float
    _loop: VirtualTimeLoop
    _scheduled: bool = True
    """Still in the loop's heap (not yet moved to the ready queue, or dropped)."""

    def when(self) -> float:
        return self._when

    def cancel(self) -> None:
        if not self._cancelled and self._scheduled:
            self._loop._cancelled_timers += 1
        super().cancel()

    def __lt__(self, other: TimerHandle) -> bool:
        """Order by time only: the heap holds ``(when, handle)``, so timers of equal
        time compare their handles, as equals, and pop in heapq's order as in asyncio."""
        return self._when < other._when

    def __repr__(self) -> str:
        return f"{super().__repr__()[:-1]} when={self._when}>"


def _describe(callback: Any, args: Any) -> str:
    name = getattr(callback, "__qualname__", None) or repr(callback)
    return f"{name}{args!r}" if args else f"{name}()"


def _debug_from_environment() -> bool:
    """Debug mode as asyncio chooses it: ``-X dev`` or ``PYTHONASYNCIODEBUG``."""
    return sys.flags.dev_mode or (
        not sys.flags.ignore_environment and bool(os.environ.get("PYTHONASYNCIODEBUG"))
    )


def _stop_when_done(future: asyncio.Future[Any]) -> None:
    """Stops the loop once ``run_until_complete``'s future is done.

    A SystemExit or KeyboardInterrupt has stopped it already, by propagating.
    """
    if not future.cancelled() and isinstance(future.exception(), (SystemExit, KeyboardInterrupt)):
        return
    future.get_loop().stop()


class Schedule(Protocol):
    """Chooses the order of one iteration's ready callbacks (see the module docstring)."""

    def order(self, batch: list[Handle]) -> tuple[list[Handle], list[Handle]]:
        """Split ``batch`` into the callbacks to run now, in order, and those to run next time.

        At least one callback runs now (so the loop makes progress).
        """
        ...


class VirtualTimeLoop(asyncio.AbstractEventLoop):
    """A single-threaded asyncio loop running on a `Timeline`'s clock.

    ``schedule``, if set, orders each iteration's ready callbacks.
    ``keep_open`` and ``closes_asyncgen`` let a world outlive the uses of its
    loop by ``asyncio.run`` and runners (see `close`). ``before_close`` runs
    once when the loop is closed (the world shuts down first, as under
    ``asyncio.run``); ``after_main`` once after the next
    ``run_until_complete``; ``describe_stall`` adds its explanation to the
    message of `SimulationStalled`. ``time_limit`` is the virtual time past
    which the loop raises `SimulationTimeLimit`.
    """

    def __init__(self, timeline: Timeline) -> None:
        self.timeline = timeline
        self.time_limit = math.inf
        self.before_close: Callable[[], None] | None = None
        self.after_main: Callable[[], None] | None = None
        self.describe_stall: Callable[[], str] | None = None
        self.schedule: Schedule | None = None
        self.keep_open: Callable[[], bool] | None = None
        self.closes_asyncgen: Callable[[Any], bool] | None = None
        """Which async generators `shutdown_asyncgens` closes (None: all of them)."""
        self._watches: dict[asyncio.Future[None], Callable[[], bool]] = {}
        """Futures to set once their condition holds, checked after each iteration."""
        self._hold: Callable[[Handle], bool] | None = None
        """While a callback runs the loop on (`run_nested`): which callbacks must wait for it."""
        self._held: list[Handle] = []
        self._held_back: list[tuple[Callable[[Handle], bool], list[Handle]]] = []
        """The callbacks of stopped threads (`hold_back`): which, and those waiting."""
        self._ready: deque[Handle] = deque()
        self._timers: list[tuple[float, TimerHandle]] = []
        """A heap of ``(when, handle)``: times compare in C, faster than handles would."""
        self._cancelled_timers = 0
        """Timers cancelled while in the heap, counted as asyncio counts them."""
        self._stopping = False
        self._running = False
        self._closed = False
        self._debug = _debug_from_environment()
        self._task_factory: Callable[..., asyncio.Future[Any]] | None = None
        self._exception_handler: ExceptionHandler | None = None
        self._asyncgens: weakref.WeakSet[Any] = weakref.WeakSet()
        self._asyncgens_shutdown_called = False

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} now={self.timeline.now} running={self._running} "
            f"closed={self._closed} debug={self._debug}>"
        )

    def run_forever(self) -> None:
        """Run callbacks, timers and the simulation until `stop()` is called."""
        self._check_closed()
        self._check_not_running()
        hooks = sys.get_asyncgen_hooks()
        self._running = True
        try:
            sys.set_asyncgen_hooks(
                firstiter=self._asyncgen_first_iterated, finalizer=self._asyncgen_finalized
            )
            asyncio._set_running_loop(self)
            while True:
                self._run_once()
                if self._stopping:
                    break
        finally:
            self._stopping = False
            self._running = False
            asyncio._set_running_loop(None)
            sys.set_asyncgen_hooks(*hooks)

    def run_until_complete(self, future: Any) -> Any:
        """Run until ``future`` is done; if it is ``asyncio.run``'s main, run ``after_main`` then.

        ``asyncio.run`` cancels every task left once its main coroutine returns;
        ``after_main`` lets the simulated cluster stop its meshes gracefully first.
        """
        hook, self.after_main = self.after_main, None
        try:
            return self._run_until_complete(future)
        finally:
            if hook is not None:
                hook()

    def _run_until_complete(self, future: Any) -> Any:
        self._check_closed()
        self._check_not_running()
        new_task = not asyncio.isfuture(future)
        future = asyncio.ensure_future(future, loop=self)
        future.add_done_callback(_stop_when_done)
        try:
            self.run_forever()
        except BaseException:
            if new_task and future.done() and not future.cancelled():
                future.exception()  # the caller cannot reach this task: mark its error as seen
            raise
        finally:
            future.remove_done_callback(_stop_when_done)
        if not future.done():
            raise RuntimeError("Event loop stopped before Future completed.")
        return future.result()

    def stop(self) -> None:
        """Stop after the callbacks that are ready now have run."""
        self._stopping = True

    def is_running(self) -> bool:
        return self._running

    def is_closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Close; a world using this loop gets to shut down first (as under ``asyncio.run``).

        While ``keep_open()`` is true, the loop stays open instead, for its owner
        to close later: ``asyncio.run`` or a ``Runner`` ending is then the end of
        one use of the loop, and async generators may start again.
        """
        if self._running:
            raise RuntimeError("Cannot close a running event loop")
        if self._closed:
            return
        if self.keep_open is not None and self.keep_open():
            self._asyncgens_shutdown_called = False
            return
        if self.before_close is not None:
            hook, self.before_close = self.before_close, None
            hook()
        self._closed = True
        self._ready.clear()
        self._timers.clear()

    async def shutdown_asyncgens(self) -> None:
        """Close the async generators still open (``asyncio.run`` calls this at the end)."""
        self._asyncgens_shutdown_called = True
        if not self._asyncgens:
            return
        closing = list(self._asyncgens)
        self._asyncgens.clear()
        results = await asyncio.gather(*(agen.aclose() for agen in closing), return_exceptions=True)
        for result, agen in zip(results, closing):
            if isinstance(result, Exception):
                self.call_exception_handler(
                    {
                        "message": f"an error occurred during closing of asynchronous generator "
                        f"{agen!r}",
                        "exception": result,
                        "asyncgen": agen,
                    }
                )

    async def shutdown_default_executor(self, timeout: float | None = None) -> None:
        """Nothing to do: this loop never has an executor (``asyncio.run`` calls this)."""

    def _check_closed(self) -> None:
        if self._closed:
            raise RuntimeError("Event loop is closed")

    def _check_not_running(self) -> None:
        if self._running:
            raise RuntimeError("This event loop is already running")
        if asyncio._get_running_loop() is not None:
            raise RuntimeError("Cannot run the event loop while another loop is running")

    def _run_once(self) -> None:
        """One iteration: the steps of the module docstring."""
        timers = self._timers
        ready = self._ready
        if timers:
            count = len(timers)
            if (
                count > _MIN_TIMERS_TO_PURGE
                and self._cancelled_timers / count > _MAX_CANCELLED_FRACTION
            ):
                self._purge_cancelled_timers()
            else:
                while timers and timers[0][1]._cancelled:
                    self._cancelled_timers -= 1
                    heapq.heappop(timers)[1]._scheduled = False

        if not ready and not self._stopping:
            if timers:
                now = self.timeline.now
                wait = timers[0][0] - now
                if wait > _MAX_WAIT:
                    wait = _MAX_WAIT
                if wait > 0:
                    self._advance(now + wait)
            else:
                self._advance(math.inf)

        if timers:
            due = self.timeline.now + _DUE_WINDOW
            while timers and timers[0][0] < due:
                handle = heapq.heappop(timers)[1]
                handle._scheduled = False
                ready.append(handle)

        count = len(ready)
        if self.schedule is not None and count > 1:
            batch = [ready.popleft() for _ in range(count)]
            first, later = self.schedule.order(batch)
            ready.extend(first)
            ready.extend(later)
            count = len(first)
        keep = self._keep if self._hold is not None or self._held_back else None
        popleft = ready.popleft
        for _ in range(count):
            if not ready:  # a callback ran the loop on, and with it the rest of this batch
                break
            handle = popleft()
            if handle._cancelled:
                continue
            if keep is not None and keep(handle):
                continue
            try:
                handle._context.run(handle._callback, *handle._args)
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException as exc:
                self._callback_failed(handle, exc)

        if self._watches:
            self._check_watches()

    def _keep(self, handle: Handle) -> bool:
        """Keep ``handle`` back if it is a stopped thread's, or must wait for a blocked one
        (`run_nested`); whether it was kept."""
        for which, held in self._held_back:
            if which(handle):
                held.append(handle)
                return True
        if self._hold is not None and self._hold(handle):
            self._held.append(handle)
            return True
        return False

    def hold_back(self, which: Callable[[Handle], bool]) -> Callable[[], None]:
        """Hold back every callback for which ``which(handle)`` is true, as those of a stopped
        thread, until the returned release is called; they then run first, in their order."""
        entry: tuple[Callable[[Handle], bool], list[Handle]] = (which, [])
        self._held_back.append(entry)

        def release() -> None:
            if any(each is entry for each in self._held_back):
                self._held_back = [each for each in self._held_back if each is not entry]
                self._ready.extendleft(reversed(entry[1]))

        return release

    def _a_watch_holds(self) -> bool:
        return any(not f.done() and condition() for f, condition in self._watches.items())

    def _check_watches(self) -> None:
        for future, condition in list(self._watches.items()):
            if future.done():
                del self._watches[future]
            elif condition():
                del self._watches[future]
                future.set_result(None)

    def watch(self, condition: Callable[[], bool]) -> asyncio.Future[None]:
        """A future set once ``condition()`` holds, checked after each iteration of the loop.

        For waits on things outside Danaus that only the loop's own callbacks can
        change (a ``threading.Event`` set by a fault hook, say). Cancel the
        future to stop watching.
        """
        future = self.create_future()
        self._watches[future] = condition
        return future

    def run_nested(
        self,
        future: asyncio.Future[Any],
        hold: Callable[[Handle], bool],
        timeout: float | None = None,
    ) -> None:
        """From inside a callback, run the loop until ``future`` is done or ``timeout`` has passed.

        For code that blocks in a callback (a task's step): the rest of the
        world runs meanwhile, but callbacks for which ``hold(handle)`` is true
        (those of the blocked actor, which on a real transport could not run
        on its blocked thread) wait until it returns, and then run first.
        """
        if asyncio._get_running_loop() is not self:
            raise RuntimeError("run_nested() runs the loop from inside one of its own callbacks")
        deadline = math.inf if timeout is None else self.timeline.now + timeout
        timer = None if timeout is None else self.call_at(deadline, _nothing)
        task = asyncio.current_task(self)
        outer_hold, outer_held, stopping = self._hold, self._held, self._stopping
        self._hold, self._held, self._stopping = hold, [], False
        if task is not None:
            asyncio.tasks._leave_task(self, task)
        try:
            while not future.done() and self.timeline.now < deadline:
                self._run_once()
                if self._stopping:  # for the outer run, once this one returns
                    stopping, self._stopping = True, False
        finally:
            if task is not None:
                asyncio.tasks._enter_task(self, task)
            if timer is not None:
                timer.cancel()
            self._ready.extendleft(reversed(self._held))
            self._hold, self._held = outer_hold, outer_held
            self._stopping = self._stopping or stopping

    def _purge_cancelled_timers(self) -> None:
        kept = []
        for entry in self._timers:
            if entry[1]._cancelled:
                entry[1]._scheduled = False
            else:
                kept.append(entry)
        heapq.heapify(kept)
        self._timers[:] = kept
        self._cancelled_timers = 0

    def _advance(self, deadline: float) -> None:
        """Process simulation events up to ``deadline``; return early once a callback is ready.

        With nothing ready by then, the clock moves to ``deadline``; with no
        deadline and nothing left to happen, the simulation has stalled.
        """
        limit = self.time_limit
        capped = deadline > limit
        if capped:
            deadline = limit
        timeline = self.timeline
        if timeline.advance(deadline, self._ready, self._watches, self._a_watch_holds):
            return
        if capped:
            raise SimulationTimeLimit(f"the simulation ran past its time limit of {limit:g} s")
        if deadline == math.inf:
            raise SimulationStalled(self._stall_message())
        if deadline > timeline.now:
            timeline.move_to(deadline)

    def _stall_message(self) -> str:
        if self.describe_stall is None:
            return _STALLED
        try:
            detail = self.describe_stall()
        except Exception as exc:
            detail = f"(describing the stall failed: {exc!r})"
        return f"{_STALLED}\n{detail}" if detail else _STALLED

    def time(self) -> float:
        """The virtual time: the timeline's clock."""
        return self.timeline.now

    def call_soon(
        self,
        callback: Callable[..., Any],
        *args: Any,
        context: contextvars.Context | None = None,
    ) -> Handle:
        if self._closed:
            raise RuntimeError("Event loop is closed")
        if self._debug:
            _check_callback(callback, "call_soon")
        handle = Handle(callback, args, contextvars.copy_context() if context is None else context)
        self._ready.append(handle)
        return handle

    def call_soon_threadsafe(
        self,
        callback: Callable[..., Any],
        *args: Any,
        context: contextvars.Context | None = None,
    ) -> Handle:
        """`call_soon`: appending to the ready queue is atomic, and the loop never sleeps
        waiting to be woken (a thread never advances virtual time)."""
        return self.call_soon(callback, *args, context=context)

    def call_later(
        self,
        delay: float,
        callback: Callable[..., Any],
        *args: Any,
        context: contextvars.Context | None = None,
    ) -> TimerHandle:
        if delay is None:
            raise TypeError("delay must not be None")
        return self.call_at(self.timeline.now + delay, callback, *args, context=context)

    def call_at(
        self,
        when: float,
        callback: Callable[..., Any],
        *args: Any,
        context: contextvars.Context | None = None,
    ) -> TimerHandle:
        if when is None:
            raise TypeError("when cannot be None")
        self._check_closed()
        if self._debug:
            _check_callback(callback, "call_at")
        if context is None:
            context = contextvars.copy_context()
        timer = TimerHandle(callback, args, context, _when=when, _loop=self)
        heapq.heappush(self._timers, (when, timer))
        return timer

    def create_future(self) -> asyncio.Future[Any]:
        return asyncio.Future(loop=self)

    def create_task(
        self,
        coro: Coroutine[Any, Any, T] | Generator[Any, None, T],
        *,
        name: str | None = None,
        context: contextvars.Context | None = None,
    ) -> asyncio.Task[T]:
        self._check_closed()
        factory = self._task_factory
        if factory is None:
            if context is None:
                return asyncio.Task(coro, loop=self, name=name)
            return asyncio.Task(coro, loop=self, name=name, context=context)
        task = factory(self, coro) if context is None else factory(self, coro, context=context)
        if name is not None:
            task.set_name(name)
        return task

    def set_task_factory(self, factory: Callable[..., asyncio.Future[Any]] | None) -> None:
        if factory is not None and not callable(factory):
            raise TypeError("task factory must be a callable or None")
        self._task_factory = factory

    def get_task_factory(self) -> Callable[..., asyncio.Future[Any]] | None:
        return self._task_factory

    def _asyncgen_first_iterated(self, agen: Any) -> None:
        if self._asyncgens_shutdown_called:
            warnings.warn(
                f"asynchronous generator {agen!r} was scheduled after "
                "loop.shutdown_asyncgens() call",
                ResourceWarning,
                stacklevel=2,
                source=self,
            )
        if self.closes_asyncgen is None or self.closes_asyncgen(agen):
            self._asyncgens.add(agen)

    def _asyncgen_finalized(self, agen: Any) -> None:
        self._asyncgens.discard(agen)
        if not self._closed:
            self.call_soon_threadsafe(self.create_task, agen.aclose())

    def get_exception_handler(self) -> ExceptionHandler | None:
        return self._exception_handler

    def set_exception_handler(self, handler: ExceptionHandler | None) -> None:
        if handler is not None and not callable(handler):
            raise TypeError(f"A callable object or None is expected, got {handler!r}")
        self._exception_handler = handler

    def default_exception_handler(self, context: dict[str, Any]) -> None:
        """Log ``context`` (an error no code was there to catch) on the ``asyncio`` logger."""
        exception = context.get("exception")
        lines = [context.get("message") or "Unhandled exception in event loop"]
        for key in sorted(context):
            if key in ("message", "exception"):
                continue
            value = context[key]
            if key == "source_traceback":
                text = "".join(traceback.format_list(value)).rstrip()
                lines.append(f"{key}: Object created at (most recent call last):\n{text}")
            else:
                lines.append(f"{key}: {value!r}")
        logger.error("\n".join(lines), exc_info=exception if exception is not None else False)

    def call_exception_handler(self, context: dict[str, Any]) -> None:
        if self._exception_handler is None:
            try:
                self.default_exception_handler(context)
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException:
                logger.error("Exception in default exception handler", exc_info=True)
            return
        try:
            self._exception_handler(self, context)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            try:
                self.default_exception_handler(
                    {
                        "message": "Unhandled error in exception handler",
                        "exception": exc,
                        "context": context,
                    }
                )
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException:
                logger.error(
                    "Exception in default exception handler while handling an unexpected "
                    "error in custom exception handler",
                    exc_info=True,
                )

    def _callback_failed(self, handle: Handle, exc: BaseException) -> None:
        self.call_exception_handler(
            {
                "message": f"Exception in callback {_describe(handle._callback, handle._args)}",
                "exception": exc,
                "handle": handle,
            }
        )

    def get_debug(self) -> bool:
        return self._debug

    def set_debug(self, enabled: bool) -> None:
        """In debug mode futures record where they were made, and callbacks are checked."""
        self._debug = enabled

    def run_in_executor(self, executor: Any, func: Callable[..., T], *args: Any) -> Any:
        raise NotImplementedError(
            f"run_in_executor({_describe(func, args)}) is not available on the simulator: "
            "threads do not run in virtual time; call the function directly, or make it a "
            "coroutine"
        )

    def set_default_executor(self, executor: Any) -> None:
        raise NotImplementedError(
            "set_default_executor() is not available on the simulator: threads do not run in "
            "virtual time"
        )


def _nothing() -> None:
    """A timer's callback that only makes the clock reach its time."""


def _check_callback(callback: Any, method: str) -> None:
    """Debug mode's check that ``callback`` is a plain callable (not a coroutine)."""
    if asyncio.iscoroutine(callback) or asyncio.iscoroutinefunction(callback):
        raise TypeError(f"coroutines cannot be used with {method}()")
    if not callable(callback):
        raise TypeError(f"a callable object was expected by {method}(), got {callback!r}")


def _not_simulated(name: str, what: str) -> Callable[..., Any]:
    def refuse(self: VirtualTimeLoop, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(
            f"{name}() is not available on the simulator: {what} do not exist in virtual time; "
            "simulated processes talk through Danaus's actors, ports and buffers"
        )

    refuse.__name__ = refuse.__qualname__ = name
    return refuse


_NOT_SIMULATED = {
    "real sockets and file descriptors": (
        "add_reader",
        "remove_reader",
        "add_writer",
        "remove_writer",
        "sock_recv",
        "sock_recv_into",
        "sock_recvfrom",
        "sock_recvfrom_into",
        "sock_sendall",
        "sock_sendto",
        "sock_connect",
        "sock_accept",
        "sock_sendfile",
        "sendfile",
        "start_tls",
        "create_connection",
        "create_server",
        "create_unix_connection",
        "create_unix_server",
        "connect_accepted_socket",
        "create_datagram_endpoint",
        "connect_read_pipe",
        "connect_write_pipe",
        "getaddrinfo",
        "getnameinfo",
    ),
    "subprocesses": ("subprocess_exec", "subprocess_shell"),
    "signals": ("add_signal_handler", "remove_signal_handler"),
}

for _what, _names in _NOT_SIMULATED.items():
    for _name in _names:
        setattr(VirtualTimeLoop, _name, _not_simulated(_name, _what))
