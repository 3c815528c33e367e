"""Future: a result that arrives later, usable from sync and async code alike."""

from __future__ import annotations

import asyncio
import collections.abc
import contextlib
from collections.abc import Generator
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from danaus.core.blocking import ThreadWaitable, block_on, discard_outcome

R = TypeVar("R")


def transfer_outcome(src: asyncio.Future[Any], dst: asyncio.Future[Any]) -> None:
    """Settle ``dst`` as ``src`` settled (on ``dst``'s loop thread)."""
    if dst.done():
        return
    if src.cancelled():
        dst.cancel()
    elif src.exception() is not None:
        dst.set_exception(src.exception())
    else:
        dst.set_result(src.result())


def new_future(loop: asyncio.AbstractEventLoop) -> tuple[asyncio.Future[Any], Future[Any]]:
    """A pending asyncio future of ``loop``, and the `Future` of it that threads wait on."""
    afut = ThreadWaitable(loop)
    return afut, Future(loop, afut)


def no_news_if_unread(future: Future[Any]) -> None:
    """Have asyncio not log ``future``'s error if nobody reads it: one reported another way
    (call it on the thread of the future's loop)."""
    future._afut.add_done_callback(discard_outcome)


class Future(Generic[R]):
    """The eventual result of a message.

    Call `get` from sync code or ``await`` it from async code. A `get` that
    times out raises `TimeoutError` and leaves the future usable: a later
    `get` or ``await`` can still collect the result. Futures are made by
    Danaus, not by users.
    """

    __slots__ = ("_afut", "_loop")

    def __init__(self, loop: asyncio.AbstractEventLoop, afut: asyncio.Future[R]) -> None:
        self._loop = loop
        self._afut = afut

    def get(self, timeout: float | None = None) -> R:
        """Wait for the result (at most ``timeout`` seconds) and return it, or raise its error."""
        if self._afut.done():
            return self._afut.result()
        return block_on(self._loop, self._afut, timeout)

    def result(self, timeout: float | None = None) -> R:
        """Same as `get`."""
        return self.get(timeout)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """Wait for the outcome and return its exception, or None if it succeeded."""
        try:
            self.get(timeout)
        except TimeoutError:
            if not self._afut.done():
                raise
            return self._afut.exception()
        except BaseException as exc:
            return exc
        return None

    def done(self) -> bool:
        return self._afut.done()

    def as_asyncio(self) -> asyncio.Future[R]:
        """A new future of the running asyncio loop that settles as this one does.

        For code that combines futures with asyncio (``asyncio.wait``,
        ``asyncio.gather``, callbacks). Each call gives a new asyncio future,
        and this future stays usable. Raises `RuntimeError` where no asyncio
        loop runs (sync code, sync endpoints).
        """
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            raise RuntimeError("as_asyncio() needs a running asyncio event loop") from None
        target: asyncio.Future[R] = running.create_future()
        afut = self._afut
        if afut.done():
            transfer_outcome(afut, target)
            return target
        if running is self._loop:
            afut.add_done_callback(lambda src: transfer_outcome(src, target))
            return target

        def forward(src: asyncio.Future[R]) -> None:
            with contextlib.suppress(RuntimeError):  # that loop has closed: nobody can await target
                running.call_soon_threadsafe(transfer_outcome, src, target)

        if isinstance(afut, ThreadWaitable):
            if not afut.when_done(forward):
                transfer_outcome(afut, target)
        else:
            self._loop.call_soon_threadsafe(afut.add_done_callback, forward)
        return target

    def __await__(self) -> Generator[Any, None, R]:
        if self._afut.done():
            return self._afut.result()
        if asyncio.get_running_loop() is self._loop:
            return (yield from self._afut.__await__())
        return (yield from self.as_asyncio().__await__())

    if not TYPE_CHECKING:  # type checkers should go on saying that a Future has no such attribute

        def __getattr__(self, name: str) -> Any:
            if name.startswith("_"):
                raise AttributeError(name)
            raise AttributeError(
                f"a Future has no attribute {name!r}: it stands for a result still to come; "
                f"did you forget .get()? (future.get().{name})"
            )

    def __repr__(self) -> str:
        state = "done" if self._afut.done() else "pending"
        return f"<danaus.Future {state}>"


class CoroutineFuture(Future[R]):
    """A `Future` that is also a coroutine: what a method returns that Monarch declares
    ``async def``, so that ``asyncio.run(procs.logging_option(...))`` works as there.

    ``asyncio.run``, ``asyncio.create_task`` and ``await`` take it as they take
    a coroutine, and ``get()`` and the other methods of a `Future` work too.
    Unlike a coroutine, its work has begun when it is returned: it is done
    whether or not anything awaits it. Each coroutine step is a step of
    awaiting it, so it can be run as a coroutine once.
    """

    __slots__ = ("_steps",)

    def __init__(self, loop: asyncio.AbstractEventLoop, afut: asyncio.Future[R]) -> None:
        super().__init__(loop, afut)
        self._steps: Generator[Any, None, R] | None = None

    @classmethod
    def of(cls, future: Future[R]) -> CoroutineFuture[R]:
        """``future`` as a coroutine too."""
        return cls(future._loop, future._afut)

    def _awaiting(self) -> Generator[Any, None, R]:
        if self._steps is None:
            self._steps = self.__await__()
        return self._steps

    def send(self, value: Any) -> Any:
        return self._awaiting().send(value)

    def throw(self, *error: Any) -> Any:
        return self._awaiting().throw(*error)

    def close(self) -> None:
        if self._steps is not None:
            self._steps.close()


collections.abc.Coroutine.register(CoroutineFuture)
