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
questions and answers, and the mark below, are the split plane's own: they
travel on the stream plane only, never numbered, begin with a kind frame of
their own (`OWN_KINDS`, which the transport's messages never begin with), and
never reach the runtime.

Each plane keeps a pair's messages in order, but two planes do not: a small
message sent after a large one may arrive first. So once a sender has UCX's
address for a receiver, it first sends a mark on the stream plane (`NUMBERED`),
and from then on each of its messages to that receiver carries its number in
the sequence that the mark begins, as a frame of 8 bytes after its kind frame
(so that a message refused for its size, of which only the leading frames are
read, still has its number: its sender is told in its place). The receiver
hands those on strictly in that order, holding any that arrive early (one on
UCX may even arrive before the mark). A pair that never uses UCX (every pair
within a host, by default) never numbers: its messages all take the stream
plane, which keeps them in order, and pass through as on tcp. The mark, not
the message, says which messages carry numbers: those after it on the stream
plane, and all on UCX. A message without a number where one is due, a number
that came twice, a second mark or a malformed message of the split plane's
own is rejected and logged. Both planes only carry messages from peers that
proved they hold the job's key. Numbered messages are handed on from one
queue, on the runtime loop's thread, so that the order given here is the
order the runtime sees: at once when one arrived there (the stream plane's)
and nothing waits on the queue, else at the loop's next turn. A message not
numbered is handed on at once: none of its sender's can be waiting.

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
from dataclasses import dataclass
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
"""A question (the kind frame alone): where does the receiver listen on UCX?"""
AT = b"@"
"""An answer: the UCX address (``host:port``) after it."""
NONE = b"-"
"""An answer: no UCX here, and why, after it."""
HERE = b"="
"""An answer: the receiver runs on the sender's host, where the stream plane is faster."""
NUMBERED = b"#"
"""The mark (the kind frame alone): from here on, the sender's messages carry their numbers."""
OWN_KINDS = frozenset({ASK, AT, NONE, HERE, NUMBERED})
"""The kind frames of the split plane's own messages (never those of the transport's)."""


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
        refuse: Callable[[str, list[Any], str], None],
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
        self._refuse = refuse
        self.address = small.address
        self._sending = threading.Lock()
        """Held while a message is numbered and handed to its plane (which may block)."""
        self._receiving = threading.Lock()
        """Held while an arrival is put in order; never waits on a plane."""
        self._sent: dict[str, int] = {}
        """The number of the next message to each receiver sent the mark (none: not numbered)."""
        self._questioned: set[str] = set()
        """Receivers asked where they listen on UCX (those that answered with an address are
        numbered: in `_sent`)."""
        self._expected: dict[str, int] = {}
        """The number of the next message to hand on, from each sender whose mark arrived.

        Only the loop's thread adds senders, so it may look one up without the lock."""
        self._early: dict[str, dict[int, list[Any] | _Refused]] = {}
        """Messages (without their numbers) that arrived before one sent earlier, or before
        their sender's mark, by sender and number."""
        self._ready: deque[tuple[str, list[Any] | _Refused]] = deque()
        """Messages in order, not yet handed to the runtime: one queue for both planes."""
        self._draining = False
        """The loop's thread has been asked to hand on `_ready`."""
        self._stopping = False

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
            self.small.send(src, [NONE, self._routes.why.encode()])
            return
        try:
            listening = self.ucx().listening()
        except UcxUnavailable as exc:
            self.small.send(src, [NONE, str(exc).encode()])
            return

        def answer(done: Future[str]) -> None:
            error = done.exception()
            if error is None:
                self.small.send(src, [AT, done.result().encode()])
            else:
                self.small.send(src, [NONE, f"UCX does not listen: {error!r}".encode()])

        listening.add_done_callback(answer)

    def _answered(self, src: str, kind: bytes, frames: list[Any]) -> None:
        """``src`` told where it listens on UCX, or why it does not (on the loop's thread)."""
        text = bytes(frames[1]).decode(errors="replace") if len(frames) == 2 else ""
        if kind == AT and _is_address(text):
            try:
                large = self.ucx()
            except UcxUnavailable:
                return
            large.resolved(src, text)
            with self._sending:
                if src in self._questioned and src not in self._sent:  # once, and only if asked
                    self.small.send(src, [NUMBERED])
                    self._sent[src] = 0
        else:
            log.info("proc %s: large messages to %s stay on TCP: %s", self._proc, src, text)

    def arrived(self, src: str, frames: list[Any]) -> None:
        """A message from the UCX plane (on its thread), numbered: hand it on in order."""
        self._pass_on(src, False, self._order, src, frames)

    def arrived_on_loop(self, src: str, frames: list[Any]) -> None:
        """A message from the stream plane (on the loop's thread): the same, at once if it can."""
        kind = bytes(frames[0])  # the stream plane delivers no message without frames
        if kind in OWN_KINDS:
            self._own(src, kind, frames)
        elif src in self._expected:
            self._pass_on(src, True, self._order, src, frames)
        else:
            self._receive(src, frames)  # not numbered: none of its sender's waits on the queue

    def refused(self, src: str, frames: list[Any], reason: str) -> None:
        """A message from the UCX plane was refused for its size (on its thread); ``frames``,
        its leading ones, hold its number: its sender hears of it in its place."""
        self._pass_on(src, False, self._order, src, frames, reason)

    def refused_on_loop(self, src: str, frames: list[Any], reason: str) -> None:
        """A message from the stream plane was refused for its size (on the loop's thread)."""
        if src in self._expected:
            self._pass_on(src, True, self._order, src, frames, reason)
        else:
            self._refuse(src, frames, reason)

    def _own(self, src: str, kind: bytes, frames: list[Any]) -> None:
        """One of the split plane's own messages (on the loop's thread)."""
        if kind in (AT, NONE):
            self._answered(src, kind, frames)
        elif len(frames) != 1:
            log.error("proc %s: rejected a malformed message from %s", self._proc, src)
        elif kind == ASK:
            self._asked(src)
        elif kind == HERE:
            log.debug("proc %s: large messages to %s stay on its Unix socket", self._proc, src)
        elif kind == NUMBERED:
            self._pass_on(src, True, self._numbering, src)

    def _pass_on(
        self, src: str, on_loop: bool, order: Callable[..., list[list[Any] | _Refused]], *args: Any
    ) -> None:
        """Hand on the messages of ``src`` that ``order(*args)`` (under the lock) puts in order.

        One lock section both orders them and queues them, so that a message
        from the other plane cannot slip in between.
        """
        wake_loop = False
        with self._receiving:
            ready = order(*args)
            if not ready:
                return
            # Handed on here only if nothing put in order before waits on the queue.
            direct = on_loop and not self._ready
            if not direct:
                self._ready.extend((src, message) for message in ready)
                if not on_loop and not self._draining:
                    self._draining = wake_loop = True
        if direct:
            for message in ready:
                self._hand_on(src, message)
        elif on_loop:
            self._drain()
        elif wake_loop:
            self._loop.call_soon_threadsafe(self._drain)

    def _order(
        self, src: str, frames: list[Any], refusal: str | None = None
    ) -> list[list[Any] | _Refused]:
        """The messages of ``src`` in order now that ``frames``, numbered, arrived (lock held);
        with a ``refusal``, ``frames`` are the leading ones of a message refused for that."""
        expected = self._expected.get(src)
        if len(frames) < 2 or memoryview(frames[1]).nbytes != _SEQUENCE.size:
            log.error("proc %s: rejected a message from %s: no sequence number", self._proc, src)
            return []
        (number,) = _SEQUENCE.unpack(frames[1])
        early = self._early.setdefault(src, {})
        if (expected is not None and number < expected) or number in early:
            log.error(
                "proc %s: rejected a message from %s: number %d came twice",
                self._proc,
                src,
                number,
            )
            return []
        message = [frames[0], *frames[2:]]
        early[number] = message if refusal is None else _Refused(message, refusal)
        return [] if expected is None else self._release(src, expected)

    def _numbering(self, src: str) -> list[list[Any] | _Refused]:
        """``src``'s mark arrived: what came from it on UCX before, in order (lock held)."""
        if src in self._expected:
            log.error("proc %s: rejected a second mark from %s", self._proc, src)
            return []
        return self._release(src, 0)

    def _release(self, src: str, expected: int) -> list[list[Any] | _Refused]:
        """The messages of ``src`` held from number ``expected`` on, as far as none is missing."""
        early = self._early.get(src, {})
        ready = []
        while expected in early:
            ready.append(early.pop(expected))
            expected += 1
        self._expected[src] = expected
        return ready

    def _drain(self) -> None:
        """Hand the runtime every message put in order so far (on the loop's thread)."""
        while True:
            with self._receiving:
                self._draining = False
                if not self._ready:
                    return
                src, message = self._ready.popleft()
            self._hand_on(src, message)

    def _hand_on(self, src: str, message: list[Any] | _Refused) -> None:
        if isinstance(message, _Refused):
            self._refuse(src, message.frames, message.reason)
        else:
            self._receive(src, message)

    def start(self) -> None:
        self.small.start()

    def send(self, dest: str, message: list[Any]) -> None:
        """Send ``message`` (kind frame first, never one of `OWN_KINDS`) to ``dest``, from any
        thread; numbered once ``dest`` has the mark."""
        large = self._may_use_ucx and sum(memoryview(f).nbytes for f in message) >= LARGE_BYTES
        ask = False
        with self._sending:
            number = self._sent.get(dest)
            if number is None:
                if large and dest not in self._questioned and not self._large_failed:
                    self._questioned.add(dest)
                    ask = True
                self.small.send(dest, message)
            else:
                self._sent[dest] = number + 1
                plane: StreamPlane | UcxPlane = self.small
                if large:
                    assert self._large is not None
                    plane = self._large
                plane.send(dest, [message[0], _SEQUENCE.pack(number), *message[1:]])
        if ask:
            self.small.send(dest, [ASK])

    def resolved(self, dest: str) -> None:
        """``dest``'s address (its stream plane's) is known."""
        self.small.resolved(dest)

    def forget(self, dest: str) -> None:
        """``dest`` is lost: both planes drop it, and so does the ordering of its messages."""
        self.small.forget(dest)
        if self._large is not None:
            self._large.forget(dest)
        with self._sending:
            self._sent.pop(dest, None)
            self._questioned.discard(dest)
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


@dataclass(frozen=True)
class _Refused:
    """A message refused for its size, in its place among its sender's: what was read of it."""

    frames: list[Any]
    reason: str


def _is_address(text: str) -> bool:
    host, _, port = text.rpartition(":")
    return bool(host) and port.isdigit()
