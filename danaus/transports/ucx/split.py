"""The ucx transport's data plane: small messages on TCP, large ones on UCX, delivered in order.

Through ucxx, every message crosses UCX's progress thread, ucxx's notifier
thread and the UCX loop's thread before it reaches the runtime, which costs a
small message several times what tcp's stream plane costs (`benchmarks/hot_path.py`
shows it stage by stage). UCX is worth that cost only for bulk, where it moves
bytes faster than TCP, and without encrypting them a second time. So a
message of fewer than `LARGE_BYTES` bytes travels on the stream plane of the tcp
transport (authenticated, and encrypted unless the job says ``encrypt=False``),
and a larger one on the UCX plane.

Each plane keeps a pair's messages in order, but two planes do not: a small
message sent after a large one may arrive first. So each message carries its
number in the sequence from its sender to its receiver, as a last frame of 8
bytes, and the receiver hands messages on strictly in that order, holding any
that arrive early. Both planes only carry messages from peers that proved they
hold the job's key, and each message is handed on from one queue, on the runtime
loop's thread, so that the order given here is the order the runtime sees: at
once when it arrived there (the stream plane's), else at the loop's next turn.

A proc's data address names both planes: ``<stream address> <UCX address>``.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from danaus.transports.tcp.streams import StreamPlane
from danaus.transports.ucx.plane import UcxPlane

log = logging.getLogger("danaus.ucx")

LARGE_BYTES = 512 * 1024
"""A message of at least this many bytes travels on UCX; a smaller one on the stream plane."""

_SEQUENCE = struct.Struct("<Q")


class SplitPlane:
    """The stream plane for small messages, the UCX plane for large ones; in order per pair.

    Thread-safe: `send`, `resolved`, `forget`; `start` and `stop` run as the
    planes they start and stop require (the runtime loop's thread).
    """

    def __init__(
        self,
        proc: str,
        small: StreamPlane,
        large: UcxPlane,
        loop: asyncio.AbstractEventLoop,
        receive: Callable[[str, list[Any]], None],
    ) -> None:
        self._proc = proc
        self.small = small
        """The stream plane (messages under `LARGE_BYTES`)."""
        self.large = large
        """The UCX plane (messages of `LARGE_BYTES` and more)."""
        self._loop = loop
        self._receive = receive
        self.address = f"{small.address} {large.address}"
        self._sending = threading.Lock()
        """Held while a message is numbered and handed to its plane (which may block)."""
        self._receiving = threading.Lock()
        """Held while an arrival is put in order; never waits on a plane."""
        self._sent: dict[str, int] = {}
        """The number of the next message to each receiver."""
        self._expected: dict[str, int] = {}
        """The number of the next message to hand on, from each sender."""
        self._early: dict[str, dict[int, list[Any]]] = {}
        """Messages that arrived before one sent earlier, by sender and number."""
        self._ready: deque[tuple[str, list[Any]]] = deque()
        """Messages in order, not yet handed to the runtime: one queue for both planes."""
        self._draining = False
        """The loop's thread has been asked to hand on `_ready`."""

    def arrived(self, src: str, frames: list[Any]) -> None:
        """A message from either plane (on its thread): hand it on in its sender's order."""
        if len(frames) < 2 or memoryview(frames[-1]).nbytes != _SEQUENCE.size:
            log.error("proc %s: rejected a message from %s: no sequence number", self._proc, src)
            return
        (number,) = _SEQUENCE.unpack(frames[-1])
        with self._receiving:
            expected = self._expected.get(src, 0)
            if number < expected or number in self._early.get(src, {}):
                log.error(
                    "proc %s: rejected a message from %s: number %d came twice",
                    self._proc,
                    src,
                    number,
                )
                return
            if number > expected:
                self._early.setdefault(src, {})[number] = frames
                return
            ready = [frames[:-1]]
            early = self._early.get(src, {})
            expected += 1
            while expected in early:
                ready.append(early.pop(expected)[:-1])
                expected += 1
            self._expected[src] = expected
            self._ready.extend((src, message) for message in ready)
            if asyncio._get_running_loop() is self._loop:
                deliver_now = True
            else:
                deliver_now = False
                if not self._draining:
                    self._draining = True
                    self._loop.call_soon_threadsafe(self._drain)
        if deliver_now:
            self._drain()

    def _drain(self) -> None:
        """Hand the runtime every message put in order so far (on the loop's thread)."""
        while True:
            with self._receiving:
                self._draining = False
                if not self._ready:
                    return
                src, message = self._ready.popleft()
            self._receive(src, message)

    # ---- the plane's contract -----------------------------------------------------------

    def start(self) -> None:
        self.small.start()
        self.large.start()

    def send(self, dest: str, message: list[Any]) -> None:
        """Send ``message`` (kind frame first) to ``dest``, from any thread."""
        size = sum(memoryview(frame).nbytes for frame in message)
        plane = self.large if size >= LARGE_BYTES else self.small
        with self._sending:
            number = self._sent.get(dest, 0)
            self._sent[dest] = number + 1
            plane.send(dest, [*message, _SEQUENCE.pack(number)])

    def resolved(self, dest: str, address: str) -> None:
        """``dest`` receives at ``address``: both planes' addresses."""
        small, _, large = address.partition(" ")
        if not small or not large:
            log.error("the data address of %s names no UCX plane: %r", dest, address)
            return
        self.small.resolved(dest, small)
        self.large.resolved(dest, large)

    def forget(self, dest: str) -> None:
        """``dest`` is lost: both planes drop it, and so does the ordering of its messages."""
        self.small.forget(dest)
        self.large.forget(dest)
        with self._sending:
            self._sent.pop(dest, None)
        with self._receiving:
            self._expected.pop(dest, None)
            self._early.pop(dest, None)

    async def drain(self, timeout: float) -> None:
        """Give the small messages still queued time to go out (UCX keeps its own)."""
        await self.small.drain(timeout)

    def stop(self) -> None:
        self.small.stop()
        self.large.stop()
