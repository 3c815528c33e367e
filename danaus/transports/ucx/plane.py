"""The UCX data plane: an endpoint to every peer, served by an asyncio loop on a thread of its own.

UCX picks the fastest way it can between two procs (shared memory, TCP,
InfiniBand...). It authenticates nothing, so every connection starts with the
challenge of `danaus.transports.challenge`: fixed-size messages read into
buffers of exactly their size, under a deadline (``handshake_timeout``), with
at most ``max_pending_handshakes`` strangers heard at once. Nothing a stranger
sends is trusted for a size or a count, and frames from a connection that fails
the challenge are never read. The listener and the strangers at it are the
door's (`danaus.transports.ucx.door`: kept to the job's address, refusals
logged); UCX's own sockets are kept to the job's device by
`danaus.transports.ucx.devices`. Once a peer is a member, each message is a
header of frame sizes, checked against the limits before anything is allocated
(`danaus.transports.ucx.framing`). A message over ``max_message_bytes`` is
refused: its leading frames (a kind, a sequence number, an envelope) are read,
the others received into one byte and so dropped, and its sender is told
(``refused``); the connection goes on.

Messages to one peer go out one at a time from one queue, over one endpoint,
so they arrive in the order sent. A connection that fails before it carried
anything (its peer too busy to answer in time) is tried again; one that fails
later, or on which the peer sends what breaks the protocol, is reported
(``broken``): messages on it may be lost, so the controller declares one of
the two procs lost, if no loss explains it first. A UCX send
completes when its buffer may be reused, not when the peer has it, and closing
an endpoint drops what is still in flight; so a stopping plane ends each
connection with `BYE` and closes it only when the peer has answered, once it
has received everything before.

Progress runs in ucxx's thread mode with Python futures: a C++ thread waits on
the UCX worker's event descriptor and a notifier thread completes the asyncio
futures, so an idle proc uses a few percent of a core. ucxx's polling and
blocking modes answer sooner but complete requests by yielding in a loop: a
whole core per proc, even idle, which starves user code on a small machine.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import os
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import ucxx

from danaus.core import home_cpu
from danaus.core.settings import ENVELOPE_ROOM, Limits
from danaus.transports import challenge
from danaus.transports.deadlines import within
from danaus.transports.tcp.buffers import BufferCache
from danaus.transports.tcp.records import carried_frames
from danaus.transports.tcp.refusals import RefusalLog
from danaus.transports.tcp.streams import KEPT_BYTES
from danaus.transports.ucx import framing
from danaus.transports.ucx.door import Door

log = logging.getLogger("danaus.ucx")

LINGER = 2.0
"""Seconds a stopping plane gives what it has queued to arrive (as zmq's linger does on tcp)."""
RETRY_PAUSE, RETRY_PAUSE_MAX = 0.1, 2.0
"""Seconds before trying a failed connection again, at first and at most."""


class _UcxLoop:
    """The one asyncio loop, on a thread of its own, where this process talks UCX.

    ucxx keeps one context per process, bound to the loop that first used it
    (its notifier completes futures there), so every plane of the process
    shares this loop; it lives as long as the process. So does the context:
    a process that runs one job after another keeps it (shutting UCX down and
    starting it again leaks a thread and file descriptors of UCX's each time),
    unless a job needs other network devices (``UCX_NET_DEVICES``), which UCX
    reads only when it starts.

    UCX is shut down at the latest when the process exits. Left alive, the UCX
    worker keeps its sockets registered with UCX's async thread, which goes on
    dispatching their events (peers closing as the job ends) while ``exit()``
    runs UCX's library destructors and frees the handler table under it:
    ``async.c: Assertion 'handler->id == id' failed``. Destroying the worker
    first unregisters every socket, so nothing is left to dispatch.
    """

    _shared: _UcxLoop | None = None
    _lock = threading.Lock()

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._planes = 0
        self._devices: str | None = None
        """``UCX_NET_DEVICES`` when UCX started (None: not started)."""
        started = threading.Event()

        def run() -> None:
            home_cpu.free_thread()
            asyncio.set_event_loop(self.loop)
            started.set()
            self.loop.run_forever()

        threading.Thread(target=run, name="danaus-ucx", daemon=True).start()
        started.wait(30)
        atexit.register(self._shut_down)

    @classmethod
    def shared(cls) -> _UcxLoop:
        """The process's loop, with one more plane counted on it."""
        with cls._lock:
            if cls._shared is None:
                cls._shared = cls()
            shared = cls._shared
            devices = os.environ.get("UCX_NET_DEVICES", "")
            if shared._planes == 0 and shared._devices not in (None, devices):
                shared._shut_down()
            shared._devices = devices
            shared._planes += 1
            return shared

    def run(self, coro: Any, timeout: float = 30) -> Any:
        """Run ``coro`` on the loop and wait for its result (from another thread)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def release(self) -> None:
        """A plane stopped."""
        with self._lock:
            self._planes -= 1

    def _shut_down(self) -> None:
        """Shut UCX down (its worker, context and threads); the next plane starts it again."""
        if self._devices is None:
            return
        self._devices = None

        async def reset() -> None:
            _wake_notifier()
            ucxx.reset()

        try:
            self.run(reset())
        except Exception as exc:
            log.warning("ucx: UCX could not be shut down: %r", exc)


def _wake_notifier() -> None:
    """Have ucxx's notifier thread end now, not after its next wait (up to 1 s) runs out.

    `ucxx.reset` asks the thread to stop and joins it, but the thread reads that
    request only between waits of a second, which made every ucx proc take a
    second to exit. ucxx has no public handle on its worker, hence its context's.
    """
    worker = getattr(getattr(ucxx.core, "_ctx", None), "worker", None)
    if worker is not None:
        worker.stop_request_notifier_thread()


class UcxPlane:
    """UCX connections of one proc. Thread-safe: `send`, `resolved`, `forget`, `stop`."""

    def __init__(
        self,
        proc: str,
        secret: bytes,
        bind_host: str,
        limits: Limits,
        refusals: RefusalLog,
        receive: Callable[[str, list[Any]], None],
        refused: Callable[[str, list[Any], str], None],
        broken: Callable[[str, str], None],
    ) -> None:
        self._proc = proc.encode()
        self._secret = secret
        self._bind_host = bind_host
        self._limits = limits
        self._refusals = refusals
        self._receive = receive
        self._refused = refused
        self._broken = broken
        self._queues: dict[str, asyncio.Queue[list[Any] | None]] = {}
        self._addresses: dict[str, str] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._endpoints: list[Any] = []
        """The endpoints this plane connected."""
        self._stopping = False
        self._draining = False
        self._ucx = _UcxLoop.shared()
        self.loop = self._ucx.loop
        self._door: Door | None = None
        self._listening: Future[str] = Future()
        self.loop.call_soon_threadsafe(self._listen)

    def _listen(self) -> None:
        try:
            door = Door(
                f"proc {self._proc.decode()} (ucx)",
                self._secret,
                self._bind_host,
                self._limits,
                self._refusals,
                self._serve,
            )
            port = door.open()
        except Exception as exc:
            log.error("ucx: proc %s cannot listen: %r", self._proc.decode(), exc)
            self._listening.set_exception(exc)
        else:
            self._door = door
            self._listening.set_result(f"{self._bind_host}:{port}")

    def listening(self) -> Future[str]:
        """This plane's address (``host:port``), once its listener listens (from any thread)."""
        return self._listening

    def send(self, dest: str, message: list[Any]) -> None:
        """Queue ``message`` (kind frame first) for ``dest``, from any thread."""
        self.loop.call_soon_threadsafe(self._enqueue, dest, message)

    def resolved(self, dest: str, address: str) -> None:
        """``dest`` receives at ``address`` (the answer to a lookup)."""
        self.loop.call_soon_threadsafe(self._resolved, dest, address)

    def _enqueue(self, dest: str, message: list[Any]) -> None:
        if self._draining:
            log.debug("ucx: proc %s is stopping; a message for %s was dropped", self._proc, dest)
            return
        queue = self._queues.get(dest)
        if queue is None:
            queue = self._queues[dest] = asyncio.Queue()
            self._tasks[dest] = self.loop.create_task(self._send_all(dest, queue))
        queue.put_nowait(message)

    def _resolved(self, dest: str, address: str) -> None:
        self._addresses[dest] = address

    async def _send_all(self, dest: str, queue: asyncio.Queue[list[Any] | None]) -> None:
        """Connect to ``dest``, pass its challenge, then send its messages in order.

        ``None`` in the queue ends the connection: `BYE`, then the peer's answer.
        """
        try:
            endpoint = await self._connect(dest)
            while (message := await queue.get()) is not None:
                await _send_message(endpoint, message)
            await endpoint.send(framing.BYE)
            await endpoint.recv(bytearray(len(framing.BYE)))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if not self._stopping:
                log.warning("ucx: sending to %s stopped: %r", dest, exc)
                self._broken(dest, f"sending on it failed: {exc!r}")

    async def _connect(self, dest: str) -> Any:
        """An endpoint to ``dest`` that has passed its challenge.

        A connection that fails before any message went out (a busy peer that
        did not answer in time, say) is tried again, after a growing pause,
        until it succeeds or ``dest`` is declared lost (which cancels this);
        a peer that fails the challenge is not.
        """
        host, port = self._addresses[dest].rsplit(":", 1)
        pause = RETRY_PAUSE
        while True:
            endpoint = None
            try:
                endpoint = await ucxx.create_endpoint(
                    host, int(port), connect_timeout=self._limits.handshake_timeout
                )
                self._endpoints.append(endpoint)
                await within(self._prove(endpoint), self._limits.handshake_timeout)
                return endpoint
            except (asyncio.CancelledError, challenge.HandshakeError):
                raise
            except Exception as exc:
                if self._stopping:
                    raise
                log.warning("ucx: connecting to %s failed (%r); again in %.2g s", dest, exc, pause)
                if endpoint is not None:
                    self._endpoints.remove(endpoint)
                    endpoint.abort()
            await asyncio.sleep(pause)
            pause = min(2 * pause, RETRY_PAUSE_MAX)

    async def _prove(self, endpoint: Any) -> None:
        """Answer the accepting side's challenge, and check that it belongs to the job too."""
        greeting = bytearray(challenge.GREETING_BYTES)
        await endpoint.recv(greeting)
        challenge.read_greeting(greeting)
        own = challenge.Ephemeral()
        answer = challenge.answer(self._secret, self._proc, bytes(greeting), own)
        await endpoint.send(answer)
        welcome = bytearray(challenge.WELCOME_BYTES)
        await endpoint.recv(welcome)
        challenge.check_welcome(self._secret, welcome, bytes(greeting), answer, own)

    def forget(self, dest: str) -> None:
        """Drop what is queued for a lost peer."""
        self.loop.call_soon_threadsafe(self._forget, dest)

    def _forget(self, dest: str) -> None:
        self._queues.pop(dest, None)
        task = self._tasks.pop(dest, None)
        if task is not None:
            task.cancel()

    async def _serve(self, endpoint: Any, src: str) -> None:
        """Receive the messages of member ``src`` until it says `BYE`."""
        header = bytearray(framing.HEADER_BYTES)
        buffers = BufferCache(KEPT_BYTES)
        limits = self._limits
        while True:
            try:
                await endpoint.recv(header)
                sizes = framing.read_header(header, limits.message_bytes, limits.message_limit)
                if not sizes:
                    await endpoint.send(framing.BYE)
                    return
                frames = buffers.frames(sizes)
                for frame in frames:
                    if frame.nbytes:
                        await endpoint.recv(frame)
            except framing.OverLimit as exc:
                await self._refuse_message(endpoint, src, exc)
                continue
            except framing.FramingError as exc:
                log.error(
                    "ucx: proc %s rejected a message from %s and closed its connection: %s",
                    self._proc.decode(),
                    src,
                    exc,
                )
                self._broken(src, f"it sent what breaks the protocol: {exc}")
                endpoint.abort()
                return
            except Exception as exc:
                log.debug("ucx: receiving from %s ended: %r", src, exc)
                return
            self._receive(src, frames)

    async def _refuse_message(self, endpoint: Any, src: str, refusal: framing.OverLimit) -> None:
        """Read a refused message's leading frames (those that fit in `ENVELOPE_ROOM`
        together), tell its sender, then receive each other frame into one byte, which drops
        it."""
        sizes = refusal.sizes
        leading = [bytearray(size) for size in sizes[: carried_frames(sizes, ENVELOPE_ROOM)]]
        for frame in leading:
            if frame:
                await endpoint.recv(frame)
        log.error("ucx: proc %s refused a message from %s: %s", self._proc.decode(), src, refusal)
        self._refused(src, leading, str(refusal))
        dropped = bytearray(1)
        for size in sizes[len(leading) :]:
            if size:
                with contextlib.suppress(ucxx.exceptions.UCXMessageTruncatedError):
                    await endpoint.recv(dropped)

    def stop(self) -> None:
        """Close this plane's listener and endpoints; after the process's last plane, UCX."""
        if self._stopping:
            return
        self._stopping = True

        async def close() -> None:
            self._draining = True
            sending = [task for task in self._tasks.values() if not task.done()]
            for queue in self._queues.values():
                queue.put_nowait(None)
            if sending:  # what was sent before the stop still arrives
                _, late = await asyncio.wait(sending, timeout=LINGER)
                if late:
                    log.warning(
                        "ucx: proc %s stopped with messages for %d peers not sent after %.1f s",
                        self._proc.decode(),
                        len(late),
                        LINGER,
                    )
            for task in self._tasks.values():
                task.cancel()
            for endpoint in self._endpoints:
                endpoint.abort()
            if self._door is not None:
                await self._door.close()
            self._endpoints.clear()
            self._tasks.clear()

        try:
            self._ucx.run(close(), timeout=LINGER + 5)
        except Exception as exc:
            log.debug("ucx: closing: %r", exc)
        self._door = None
        self._ucx.release()


async def _send_message(endpoint: Any, message: list[Any]) -> None:
    """The header of ``message``'s frame sizes, then its non-empty frames, posted in order."""
    views = [memoryview(frame) for frame in message]
    sizes = [view.nbytes for view in views]
    sends = [endpoint.send(framing.header(sizes))]
    sends += [endpoint.send(view) for view in views if view.nbytes]
    await asyncio.gather(*sends)
