"""What a tensor worker waits for: values from peer procs, and events of its own streams.

A stream that needs a value from another proc (a part of a collective on
the simulator, the offer of a tensor moving between meshes) takes it from the
worker's `Inbox` by key; it arrives in a message to the worker's actor,
usually from a thread other than the waiting stream's. If the proc it is
expected from is lost first, the wait fails with `SupervisionError` (the
worker hears of losses through a port that nobody sends to, as every port of
a proc is told). `Events` order the streams of one proc (a borrow).
"""

from __future__ import annotations

import asyncio
import threading
from typing import TYPE_CHECKING, Any

from danaus.core.errors import MeshStoppedError, SupervisionError
from danaus.core.future import Future, new_future
from danaus.core.ports import PortHandler

if TYPE_CHECKING:
    from danaus.core.runtime import Runtime


def _settle(afut: asyncio.Future[Any], value: Any, error: BaseException | None) -> None:
    if afut.done():
        return
    if error is not None:
        afut.set_exception(error)
    else:
        afut.set_result(value)


class _LossWatch(PortHandler):
    """A port nobody sends to, opened to be told when a proc is lost."""

    def __init__(self, inbox: Inbox) -> None:
        self._inbox = inbox

    def deliver(self, rank: int, payload: list[Any], error: bool) -> None:
        """Nothing is ever sent here."""

    def close(self) -> None:
        """The worker is stopping: whatever is still awaited fails, so that its stream ends."""
        with self._lock:
            futures = [afut for afut, _ in self._waiting.values()]
            self._waiting.clear()
        for afut in futures:
            self._runtime.on_loop(
                _settle, afut, None, MeshStoppedError("the tensor worker stopped")
            )

    def lost(self, proc: str, error: SupervisionError) -> None:
        self._inbox.lost(proc, error)


class Inbox:
    """Values sent to this worker by key, each taken once by the stream that waits for it."""

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime
        self._lock = threading.Lock()
        self._arrived: dict[Any, Any] = {}
        self._waiting: dict[Any, tuple[asyncio.Future[Any], str]] = {}
        self._lost: dict[str, SupervisionError] = {}
        self._watch = _LossWatch(self)
        runtime.on_loop(runtime.open_port, self._watch)

    def put(self, key: Any, value: Any) -> None:
        """``value`` for ``key`` has arrived (from any thread)."""
        with self._lock:
            waiting = self._waiting.pop(key, None)
            if waiting is None:
                self._arrived[key] = value
                return
        self._runtime.on_loop(_settle, waiting[0], value, None)

    def take(self, key: Any, source: str) -> Future[Any]:
        """A future of the value for ``key``, which proc ``source`` sends; it fails if
        ``source`` is lost first."""
        afut, future = new_future(self._runtime.loop)
        with self._lock:
            if key in self._arrived:
                value = self._arrived.pop(key)
            elif source in self._lost:
                self._runtime.on_loop(_settle, afut, None, self._lost[source])
                return future
            else:
                self._waiting[key] = (afut, source)
                self._runtime.on_loop(self._runtime.watch, source)
                return future
        self._runtime.on_loop(_settle, afut, value, None)
        return future

    def close(self) -> None:
        """The worker is stopping: whatever is still awaited fails, so that its stream ends."""
        with self._lock:
            futures = [afut for afut, _ in self._waiting.values()]
            self._waiting.clear()
        for afut in futures:
            self._runtime.on_loop(
                _settle, afut, None, MeshStoppedError("the tensor worker stopped")
            )

    def lost(self, proc: str, error: SupervisionError) -> None:
        """``proc`` is gone (on the runtime's loop): whatever is awaited from it fails."""
        with self._lock:
            self._lost[proc] = error
            failed = [key for key, (_, source) in self._waiting.items() if source == proc]
            futures = [self._waiting.pop(key)[0] for key in failed]
        for afut in futures:
            _settle(afut, None, error)


class Events:
    """Points in one stream's work that another stream of the same proc waits for."""

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime
        self._lock = threading.Lock()
        self._events: dict[int, tuple[asyncio.Future[Any], Future[Any]]] = {}

    def _touch(self, event: int) -> tuple[asyncio.Future[Any], Future[Any]]:
        """The event's futures: made by whichever side comes first, forgotten by the second."""
        with self._lock:
            found = self._events.pop(event, None)
            if found is None:
                found = self._events[event] = new_future(self._runtime.loop)
            return found

    def signal(self, event: int) -> None:
        self._runtime.on_loop(_settle, self._touch(event)[0], None, None)

    def wait(self, event: int) -> Future[Any]:
        """A future that settles once ``event`` is signalled (each event is awaited once)."""
        return self._touch(event)[1]

    def close(self) -> None:
        """The worker is stopping: events still awaited fail, so that their streams end."""
        with self._lock:
            futures = [afut for afut, _ in self._events.values()]
            self._events.clear()
        stopped = MeshStoppedError("the tensor worker stopped")
        for afut in futures:
            self._runtime.on_loop(_settle, afut, None, stopped)
