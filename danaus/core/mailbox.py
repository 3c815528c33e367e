"""An actor's mailbox: the messages it has yet to handle, and how work reaches its thread.

The proc's runtime receives every message on its loop's thread; a user actor
runs on a thread of its own (on the simulator, on that same loop). `post`
hands a message over, `hand_off` any other work: both run on the actor's
thread in the order they were handed over.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from danaus.core.serialize import Buffer
from danaus.core.wire import Call

Accept = Callable[[str, Call, list[Buffer]], None]
"""What takes a message on the actor's thread: ``accept(src, call, payload)``."""


class Mailbox:
    """A FIFO of messages drained by one task, fed from the runtime's thread.

    Leaner than `asyncio.Queue` on the hot path: the draining task pops `items`
    itself and awaits `arrival` only when they run out.
    """

    __slots__ = (
        "_accept",
        "_inbox",
        "_inbox_woken",
        "_same_loop",
        "_waiter",
        "accepted",
        "items",
        "loop",
        "posted",
        "thread",
    )

    def __init__(
        self, home: asyncio.AbstractEventLoop, loop: asyncio.AbstractEventLoop, accept: Accept
    ) -> None:
        self.loop = loop
        """The loop of the actor's thread."""
        self._same_loop = loop is home
        """The actor runs on the runtime's own loop (an agent, or any actor on the simulator)."""
        self._accept = accept
        self.items: deque[Any] = deque()
        """The queued messages, for the draining task to pop (see `arrival`)."""
        self._waiter: asyncio.Future[None] | None = None
        self._inbox: deque[tuple[str, Call, list[Buffer]]] = deque()
        """Messages posted and not yet taken by the actor's thread (one wake-up per burst)."""
        self._inbox_woken = False
        """The actor's thread has been asked to take the inbox."""
        self.posted = 0
        """Messages posted to this actor (counted on the runtime's thread)."""
        self.accepted = 0
        """Of those, how many reached its thread (counted there)."""
        self.thread: int | None = None
        """The id of the thread the actor's code runs on, once it runs."""

    @property
    def depth(self) -> int:
        """How many messages wait: queued, or on the way to the actor's thread.

        A sync endpoint that blocks the actor's thread holds back the messages
        posted meanwhile before they are queued; they count too.
        """
        return len(self.items) + self.posted - self.accepted

    def hand_off(self, fn: Callable[..., object], *args: Any) -> None:
        """Run ``fn(*args)`` on the actor's thread: at once if its loop is the runtime's.

        Once the actor's loop takes no more work, the actor is gone; ``fn``
        then runs here and finds it so.
        """
        if self._same_loop:
            fn(*args)
            return
        try:
            self.loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:
            # The actor's loop is closed: its thread has ended, so nothing else runs the
            # actor's code, and running ``fn`` here races with nobody.
            fn(*args)

    def on_own_thread(self, fn: Callable[..., None], *args: Any) -> None:
        """Run ``fn`` now if called from the actor's own thread, else hand it to that thread."""
        if threading.get_ident() == self.thread:
            fn(*args)
        else:
            self.hand_off(fn, *args)

    def post(self, src: str, call: Call, payload: list[Buffer]) -> None:
        """Hand over a message from proc ``src`` (from the runtime's thread).

        Messages that arrive while the actor's thread has yet to take the last
        ones join them: a burst costs that thread one wake-up. Whatever is
        handed off afterwards still runs after they are taken, since the
        wake-up that takes them was queued first.
        """
        self.posted += 1
        if self._same_loop:
            self.accepted += 1
            self._accept(src, call, payload)
            return
        self._inbox.append((src, call, payload))
        # The flag is set before the hand-off and cleared by the actor's thread before it
        # drains: a message appended after the drain began is either drained too or finds
        # the flag clear and asks for another wake-up. None is left behind.
        if not self._inbox_woken:
            self._inbox_woken = True
            self.hand_off(self._take_inbox)

    def _take_inbox(self) -> None:
        """Accept the messages posted so far (on the actor's thread, or on the runtime's
        once the actor's loop takes no more work: then both may take at once, which the
        deque's atomic ``popleft`` allows)."""
        self._inbox_woken = False
        inbox = self._inbox
        accept = self._accept
        while True:
            try:
                message = inbox.popleft()
            except IndexError:
                return
            self.accepted += 1
            accept(*message)

    def put(self, item: Any) -> None:
        self.items.append(item)
        self._wake()

    def put_first(self, item: Any) -> None:
        """Queue ``item`` ahead of every message: it runs at the next safe point."""
        self.items.appendleft(item)
        self._wake()

    def arrival(self) -> asyncio.Future[None]:
        """A future set once something is put: the draining task awaits it while ``items`` is
        empty (a plain future, as a coroutine for each message would cost more)."""
        self._waiter = self.loop.create_future()
        return self._waiter

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)

    def take_all(self) -> list[Any]:
        items = list(self.items)
        self.items.clear()
        return items
