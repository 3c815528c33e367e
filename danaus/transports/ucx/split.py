"""The ucx transport's data plane: small messages on TCP, large ones on UCX, delivered in order.

Through ucxx, every message crosses UCX's progress thread, ucxx's notifier
thread and the UCX loop's thread before it reaches the runtime, which costs a
small message several times what tcp's stream plane costs (`benchmarks/hot_path.py`
shows it stage by stage). UCX is worth that cost only for bulk, where it moves
bytes faster than TCP, and without encrypting them a second time. So a
message of fewer than `LARGE_BYTES` bytes travels on the stream plane of the tcp
transport (authenticated, and encrypted unless the job says ``encrypt=False``),
and a larger one on the UCX plane.

Between procs of one host, large messages stay on the stream plane too, whose
Unix socket moves them faster than UCX does there. ucxx's connections handle
the failure of their peer, which rules out UCX's shared-memory transports (and
UCX does not choose CMA for them), so UCX carries their messages over TCP on
loopback, through bounce buffers: about 300 MB/s for a 1 MiB message on a
small VM, where the Unix socket, encrypted, moves over 1 GB/s. So do large
messages to other hosts where UCX has no RDMA device to reach them by
(`danaus.transports.ucx.fabric`, which also says how to send them over UCX
anyway).

UCX starts in a proc only when the proc first has bulk to move: most procs
(a controller that sends small calls, an actor that answers them) never pay
for UCX's threads, its start or its teardown. The first large message for a
peer goes on the stream plane, with a question on the side: where does the
peer listen on UCX? The peer starts UCX if it has not yet, and answers with its
UCX address (or why it has none, and then large messages to it stay on the
stream plane; so do those to a peer on the same host, or to one without an
RDMA device, which answers so without starting UCX). A proc without an RDMA
device does not ask at all. From the answer on, large messages to it travel on UCX. These
questions and answers are the split plane's own, on the stream plane, and
never reach the runtime.

Each plane keeps a pair's messages in order, but two planes do not: a small
message sent after a large one may arrive first. So each message carries its
number in the sequence from its sender to its receiver, as a last frame of 8
bytes, and the receiver hands messages on strictly in that order, holding any
that arrive early. Both planes only carry messages from peers that proved they
hold the job's key, and each message is handed on from one queue, on the runtime
loop's thread, so that the order given here is the order the runtime sees: at
once when it arrived there (the stream plane's), else at the loop's next turn.

A proc's data address is that of its stream plane.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from danaus.transports.tcp.streams import StreamPlane
from danaus.transports.ucx.fabric import BulkRoutes

if TYPE_CHECKING:
    from danaus.transports.ucx.plane import UcxPlane

log = logging.getLogger("danaus.ucx")

LARGE_BYTES = 512 * 1024
"""A message of at least this many bytes travels on UCX; a smaller one on the stream plane."""

_SEQUENCE = struct.Struct("<Q")

ASK = b"?"
"""The last frame of a question: where does the receiver listen on UCX?"""
AT = b"@"
"""The last frame of an answer: the UCX address (``host:port``) before it."""
NONE = b"-"
"""The last frame of an answer: no UCX here, and why, before it."""
HERE = b"="
"""An answer: the receiver runs on the sender's host, where the stream plane is faster."""


class UcxUnavailable(RuntimeError):
    """UCX cannot be started in this process (the reason is the message)."""


class SplitPlane:
    """The stream plane for small messages, the UCX plane for large ones; in order per pair.

    Thread-safe: `send`, `resolved`, `forget`, `ucx`; `start` and `stop` run as
    the planes they start and stop require (the runtime loop's thread).
    """

    def __init__(
        self,
        proc: str,
        small: StreamPlane,
        start_large: Callable[[], UcxPlane],
        loop: asyncio.AbstractEventLoop,
        receive: Callable[[str, list[Any]], None],
        routes: BulkRoutes,
    ) -> None:
        self._proc = proc
        self._routes = routes
        self._may_use_ucx = routes.on_this_host or routes.between_hosts
        """Whether any message from here may take UCX (if not, no size is worth computing)."""
        self.small = small
        """The stream plane (messages under `LARGE_BYTES`, and the questions about UCX)."""
        self._start_large = start_large
        self._large: UcxPlane | None = None
        self._large_failed = ""
        """Why UCX could not be started here (empty: it has not failed)."""
        self._starting = threading.Lock()
        self._loop = loop
        self._receive = receive
        self.address = small.address
        self._sending = threading.Lock()
        """Held while a message is numbered and handed to its plane (which may block)."""
        self._receiving = threading.Lock()
        """Held while an arrival is put in order; never waits on a plane."""
        self._sent: dict[str, int] = {}
        """The number of the next message to each receiver."""
        self._on_ucx: dict[str, bool] = {}
        """Receivers asked where they listen on UCX: True once they answered with an address."""
        self._expected: dict[str, int] = {}
        """The number of the next message to hand on, from each sender."""
        self._early: dict[str, dict[int, list[Any]]] = {}
        """Messages that arrived before one sent earlier, by sender and number."""
        self._ready: deque[tuple[str, list[Any]]] = deque()
        """Messages in order, not yet handed to the runtime: one queue for both planes."""
        self._draining = False
        """The loop's thread has been asked to hand on `_ready`."""
        self._stopping = False

    # ---- UCX, started on demand -----------------------------------------------------------

    def ucx(self) -> UcxPlane:
        """This proc's UCX plane, started now if it was not; raises `UcxUnavailable`."""
        with self._starting:
            if self._large is None and not self._large_failed:
                try:
                    self._large = self._start_large()
                except Exception as exc:
                    self._large_failed = f"UCX could not be started: {exc!r}"
                    log.warning("proc %s: %s; large messages go over TCP", self._proc, exc)
            if self._large is None:
                raise UcxUnavailable(self._large_failed)
            return self._large

    def _asked(self, src: str) -> None:
        """``src`` asks where this proc listens on UCX (on the loop's thread)."""
        if self._stopping:
            return
        if self.small.on_this_host(src) and not self._routes.on_this_host:
            self.small.send(src, [HERE])
            return
        if not self._routes.between_hosts:
            self.small.send(src, [self._routes.why.encode(), NONE])
            return
        try:
            listening = self.ucx().listening()
        except UcxUnavailable as exc:
            self.small.send(src, [str(exc).encode(), NONE])
            return

        def answer(done: Future[str]) -> None:
            error = done.exception()
            if error is None:
                self.small.send(src, [done.result().encode(), AT])
            else:
                self.small.send(src, [f"UCX does not listen: {error!r}".encode(), NONE])

        listening.add_done_callback(answer)

    def _answered(self, src: str, frames: list[Any]) -> None:
        """``src`` told where it listens on UCX, or why it does not (on the loop's thread)."""
        text = bytes(frames[0]).decode(errors="replace") if len(frames) == 2 else ""
        if bytes(frames[-1]) == AT and _is_address(text):
            try:
                large = self.ucx()
            except UcxUnavailable:
                return
            large.resolved(src, text)
            with self._sending:
                if src in self._on_ucx:
                    self._on_ucx[src] = True
        else:
            log.info("proc %s: large messages to %s stay on TCP: %s", self._proc, src, text)

    # ---- receiving --------------------------------------------------------------------

    def arrived(self, src: str, frames: list[Any]) -> None:
        """A message from the UCX plane (on its thread): hand it on in its sender's order."""
        self._take(src, frames, on_loop=False)

    def arrived_on_loop(self, src: str, frames: list[Any]) -> None:
        """A message from the stream plane (on the loop's thread): the same, at once if it can."""
        self._take(src, frames, on_loop=True)

    def _take(self, src: str, frames: list[Any], on_loop: bool) -> None:
        last = memoryview(frames[-1]).nbytes if frames else 0
        if last == 1 and len(frames) <= 2:
            marker = bytes(frames[-1])
            if marker == ASK and len(frames) == 1:
                self._asked(src)
                return
            if marker == HERE and len(frames) == 1:
                log.debug("proc %s: large messages to %s stay on its Unix socket", self._proc, src)
                return
            if marker in (AT, NONE):
                self._answered(src, frames)
                return
        if len(frames) < 2 or last != _SEQUENCE.size:
            log.error("proc %s: rejected a message from %s: no sequence number", self._proc, src)
            return
        (number,) = _SEQUENCE.unpack(frames[-1])
        wake_loop = False
        with self._receiving:
            expected = self._expected.get(src, 0)
            early = self._early.get(src)
            if number < expected or (early is not None and number in early):
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
            expected += 1
            while early and expected in early:
                ready.append(early.pop(expected)[:-1])
                expected += 1
            self._expected[src] = expected
            # Handed on here only if nothing put in order before waits on the queue.
            direct = on_loop and not self._ready
            if not direct:
                self._ready.extend((src, message) for message in ready)
                if not on_loop and not self._draining:
                    self._draining = wake_loop = True
        if direct:
            for message in ready:
                self._receive(src, message)
        elif on_loop:
            self._drain()
        elif wake_loop:
            self._loop.call_soon_threadsafe(self._drain)

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

    def send(self, dest: str, message: list[Any]) -> None:
        """Send ``message`` (kind frame first) to ``dest``, from any thread."""
        large = self._may_use_ucx and sum(memoryview(f).nbytes for f in message) >= LARGE_BYTES
        ask = False
        with self._sending:
            number = self._sent.get(dest, 0)
            self._sent[dest] = number + 1
            plane: StreamPlane | UcxPlane = self.small
            if large:
                if self._on_ucx.get(dest):
                    assert self._large is not None
                    plane = self._large
                elif dest not in self._on_ucx and self._asks():
                    self._on_ucx[dest] = False
                    ask = True
            plane.send(dest, [*message, _SEQUENCE.pack(number)])
        if ask:
            self.small.send(dest, [ASK])

    def _asks(self) -> bool:
        """Whether a first large message to a peer comes with a question about UCX."""
        return self._may_use_ucx and not self._large_failed

    def resolved(self, dest: str, address: str) -> None:
        """``dest`` receives at ``address`` (its stream plane's)."""
        self.small.resolved(dest, address)

    def forget(self, dest: str) -> None:
        """``dest`` is lost: both planes drop it, and so does the ordering of its messages."""
        self.small.forget(dest)
        if self._large is not None:
            self._large.forget(dest)
        with self._sending:
            self._sent.pop(dest, None)
            self._on_ucx.pop(dest, None)
        with self._receiving:
            self._expected.pop(dest, None)
            self._early.pop(dest, None)

    async def drain(self, timeout: float) -> None:
        """Give the small messages still queued time to go out (UCX keeps its own)."""
        await self.small.drain(timeout)

    def stop(self) -> None:
        self._stopping = True
        self.small.stop()
        with self._starting:
            large, self._large_failed = self._large, "the proc is stopping"
        if large is not None:
            large.stop()


def _is_address(text: str) -> bool:
    host, _, port = text.rpartition(":")
    return bool(host) and port.isdigit()
