"""The UCX data plane: an endpoint to every peer, served by an asyncio loop on a thread of its own.

UCX picks the fastest way it can between two procs (shared memory, TCP,
InfiniBand...). It authenticates nothing, so every connection starts with a
challenge: the accepting side sends a random nonce, the connecting side
answers with its proc id and an HMAC of both under the job's secret, which
only members of the job hold (it reaches workers on their stdin, like the
CURVE key). Frames from a connection that fails the challenge are never read.

Messages to one peer go out one at a time from one queue, over one endpoint,
so they arrive in the order sent. A UCX send completes when its buffer may be
reused, not when the peer has it, and closing an endpoint drops what is still
in flight; so a stopping plane ends each connection with `BYE` and closes it
only when the peer has answered, once it has received everything before.

Progress runs in ucxx's thread mode with Python futures: a C++ thread waits on
the UCX worker's event descriptor and a notifier thread completes the asyncio
futures, so an idle proc uses a few percent of a core. ucxx's polling and
blocking modes answer sooner but complete requests by yielding in a loop: a
whole core per proc, even idle, which starves user code on a small machine.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import os
import threading
from collections.abc import Callable
from typing import Any

import ucxx

log = logging.getLogger("danaus.ucx")

GREETING = b"DNSU1"
"""First frame of the challenge: names the protocol and its version."""

BYE = b"DNSU-BYE"
"""A connection's last message, answered in kind once everything before it has arrived."""

LINGER = 2.0
"""Seconds a stopping plane gives what it has queued to arrive (as zmq's linger does on tcp)."""


def _proof(secret: bytes, nonce: bytes, proc: bytes) -> bytes:
    return hmac.new(secret, nonce + b"/" + proc, hashlib.sha256).digest()


class _UcxLoop:
    """The one asyncio loop, on a thread of its own, where this process talks UCX.

    ucxx keeps one context per process, bound to the loop that first used it
    (its notifier completes futures there), so every plane of the process
    shares this loop; it lives as long as the process.
    """

    _shared: _UcxLoop | None = None
    _lock = threading.Lock()

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        started = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(self.loop)
            started.set()
            self.loop.run_forever()

        threading.Thread(target=run, name="danaus-ucx", daemon=True).start()
        started.wait(30)

    @classmethod
    def shared(cls) -> _UcxLoop:
        with cls._lock:
            if cls._shared is None:
                cls._shared = cls()
            return cls._shared

    def run(self, coro: Any, timeout: float = 30) -> Any:
        """Run ``coro`` on the loop and wait for its result (from another thread)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)


class UcxPlane:
    """UCX connections of one proc. Thread-safe: `send`, `resolved`, `forget`, `stop`."""

    def __init__(
        self,
        proc: str,
        secret: bytes,
        bind_host: str,
        receive: Callable[[str, list[Any]], None],
        lookup: Callable[[str], None],
    ) -> None:
        self._proc = proc.encode()
        self._secret = secret
        self._receive = receive
        self._lookup = lookup
        self._queues: dict[str, asyncio.Queue[list[Any] | None]] = {}
        self._addresses: dict[str, asyncio.Future[str]] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._endpoints: list[Any] = []
        self._handlers: set[asyncio.Task[Any]] = set()
        self._stopping = False
        self._draining = False
        self._ucx = _UcxLoop.shared()
        self.loop = self._ucx.loop

        async def listen() -> Any:
            return ucxx.create_listener(self._accept)

        self._listener = self._ucx.run(listen())
        self.address = f"{bind_host}:{self._listener.port}"

    def start(self) -> None:
        """Receiving began with the listener; nothing more to do."""

    # ---- sending ----------------------------------------------------------------------

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

    def _address(self, dest: str) -> asyncio.Future[str]:
        found = self._addresses.get(dest)
        if found is None:
            found = self._addresses[dest] = self.loop.create_future()
            self._lookup(dest)
        return found

    def _resolved(self, dest: str, address: str) -> None:
        found = self._addresses.get(dest)
        if found is None:
            self._addresses[dest] = found = self.loop.create_future()
        if not found.done():
            found.set_result(address)

    async def _send_all(self, dest: str, queue: asyncio.Queue[list[Any] | None]) -> None:
        """Connect to ``dest``, answer its challenge, then send its messages in order.

        ``None`` in the queue ends the connection: `BYE`, then the peer's answer.
        """
        try:
            host, port = (await self._address(dest)).rsplit(":", 1)
            endpoint = await ucxx.create_endpoint(host, int(port))
            self._endpoints.append(endpoint)
            greeting = await endpoint.recv_multi()
            if len(greeting) != 2 or bytes(greeting[0]) != GREETING:
                raise ConnectionError(f"{dest} did not greet as a Danaus proc")
            nonce = bytes(greeting[1])
            await endpoint.send_multi([self._proc, _proof(self._secret, nonce, self._proc)])
            while (message := await queue.get()) is not None:
                await endpoint.send_multi(message)
            await endpoint.send_multi([BYE])
            await endpoint.recv_multi()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if not self._stopping:
                log.warning("ucx: sending to %s stopped: %r", dest, exc)

    def forget(self, dest: str) -> None:
        """Drop what is queued for a lost peer."""
        self.loop.call_soon_threadsafe(self._forget, dest)

    def _forget(self, dest: str) -> None:
        self._queues.pop(dest, None)
        task = self._tasks.pop(dest, None)
        if task is not None:
            task.cancel()

    # ---- receiving --------------------------------------------------------------------

    async def _accept(self, endpoint: Any) -> None:
        handler = asyncio.current_task()
        if handler is not None:
            self._handlers.add(handler)
            handler.add_done_callback(self._handlers.discard)
        self._endpoints.append(endpoint)
        nonce = os.urandom(16)
        try:
            await endpoint.send_multi([GREETING, nonce])
            answer = await endpoint.recv_multi()
            if len(answer) != 2:
                raise PermissionError("a malformed answer to the challenge")
            proc = bytes(answer[0])
            if not hmac.compare_digest(bytes(answer[1]), _proof(self._secret, nonce, proc)):
                raise PermissionError("a wrong answer to the challenge")
            src = proc.decode()
        except Exception as exc:
            log.warning("ucx: refused a connection: %s", exc)
            endpoint.abort()
            return
        while True:
            try:
                frames = await endpoint.recv_multi()
                if len(frames) == 1 and bytes(frames[0]) == BYE:
                    await endpoint.send_multi([BYE])
                    return
            except Exception as exc:
                log.debug("ucx: receiving from %s ended: %r", src, exc)
                return
            if frames:
                self._receive(src, frames)

    # ---- ending -----------------------------------------------------------------------

    def stop(self) -> None:
        """Close this plane's listener and endpoints (the process's UCX loop lives on)."""
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
            if self._handlers:  # they end once their endpoint is aborted
                await asyncio.wait(self._handlers, timeout=1)
            self._listener.close()

        try:
            self._ucx.run(close(), timeout=LINGER + 5)
        except Exception as exc:
            log.debug("ucx: closing: %r", exc)
