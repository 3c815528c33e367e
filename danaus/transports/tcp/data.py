"""The tcp data plane: core messages over zmq, sent by the caller's thread, received on the loop's.

Control messages, heartbeats and RDMA transfers stay on the I/O thread, where
user code cannot hold them up. Core messages are different: they come from and
go to the runtime anyway, so they cross no extra thread. The thread that sends
writes to the peer's DEALER itself, under a lock (a zmq socket may move between
threads when a lock orders its uses); one DEALER per peer keeps a pair's
messages in order. The ROUTER that receives is read on the runtime loop's thread.

The data plane's sockets live in a zmq context of their own, whose I/O thread
encrypts and decrypts nothing but core messages: however large a message, the
control plane's thread (heartbeats, loss notices) is never behind it. Large
frames travel in bounded chunks (`danaus.transports.tcp.chunks`).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from typing import Any

import zmq

from danaus.transports.tcp.chunks import ChunkError, Reassembly, split
from danaus.transports.tcp.limits import Limits
from danaus.transports.tcp.security import JobKeys
from danaus.transports.tcp.sockets import RECV_BATCH, bind_router, connect_dealer, sender

log = logging.getLogger("danaus.tcp")


class ZmqPlane:
    """A proc's data sockets: one authenticated ROUTER in, a DEALER per peer out.

    Thread-safe: `send`, `resolved`, `forget`. ``receive`` is called on the
    loop's thread, ``lookup`` on whichever thread sends first to a new peer.
    """

    def __init__(
        self,
        proc: str,
        context: zmq.Context,
        keys: JobKeys,
        bind_host: str,
        limits: Limits,
        loop: asyncio.AbstractEventLoop,
        receive: Callable[[str, list[Any]], None],
        lookup: Callable[[str], None],
    ) -> None:
        self._proc = proc
        self._context = context
        self._keys = keys
        self._limits = limits
        self.loop = loop
        self._receive = receive
        self._lookup = lookup
        self.router = bind_router(context, keys, bind_host, limits)
        self.address = self.router.last_endpoint.decode()
        self._arriving: dict[str, Reassembly] = {}
        self._dealers: dict[str, zmq.Socket] = {}
        self._addresses: dict[str, str] = {}
        self._pending: dict[str, list[list[Any]]] = {}
        self._forgotten: set[str] = set()
        self._lock = threading.Lock()

    def start(self) -> None:
        """Begin receiving (on the loop's thread, or before the loop runs)."""
        self.loop.add_reader(self.router.getsockopt(zmq.FD), self._readable)
        self.loop.call_soon(self._readable)

    # ---- sending ----------------------------------------------------------------------

    def send(self, dest: str, message: list[Any]) -> None:
        """Send ``message`` (kind frame first) to ``dest``, from any thread."""
        with self._lock:
            self._send(dest, message)

    def _send(self, dest: str, message: list[Any]) -> None:
        if dest in self._forgotten:
            return
        dealer = self._dealers.get(dest)
        if dealer is None:
            address = self._addresses.get(dest)
            if address is None:
                waiting = self._pending.setdefault(dest, [])
                if not waiting:
                    self._lookup(dest)
                waiting.append(message)
                return
            dealer = connect_dealer(self._context, self._keys, self._proc, address, self._limits)
            self._dealers[dest] = dealer
        for part in split(message, self._limits.chunk_bytes):
            dealer.send_multipart(part, copy=False)

    def resolved(self, dest: str, address: str) -> None:
        """``dest`` receives data at ``address``: what waited for it goes out, in order."""
        with self._lock:
            self._addresses[dest] = address
            for message in self._pending.pop(dest, []):
                self._send(dest, message)

    def forget(self, dest: str) -> None:
        """``dest`` is lost: drop what waits for it and its socket."""
        with self._lock:
            self._forgotten.add(dest)
            self._pending.pop(dest, None)
            if not self.loop.is_closed():
                self.loop.call_soon_threadsafe(self._arriving.pop, dest, None)
            dealer = self._dealers.pop(dest, None)
            if dealer is not None:
                dealer.close(0)

    # ---- receiving --------------------------------------------------------------------

    def _readable(self) -> None:
        router = self.router
        for _ in range(RECV_BATCH):
            if not router.getsockopt(zmq.EVENTS) & zmq.POLLIN:
                return
            message = router.recv_multipart(zmq.NOBLOCK, copy=False)
            src = sender(self._proc, message)
            if src is not None:
                self._arrived(src, [message[1].bytes, *(frame.buffer for frame in message[2:])])
        self.loop.call_soon(self._readable)

    def _arrived(self, src: str, frames: list[Any]) -> None:
        arriving = self._arriving.get(src)
        if arriving is None:
            arriving = self._arriving[src] = Reassembly(self._limits.max_message_bytes)
        try:
            message = arriving.feed(frames)
        except ChunkError as exc:
            log.error("proc %s: rejected a message from %s: %s", self._proc, src, exc)
            return
        if message is not None:
            self._receive(src, message)

    # ---- ending -----------------------------------------------------------------------

    def stop(self) -> None:
        """Close the sockets (on the loop's thread)."""
        if self.router.closed:
            return
        self.loop.remove_reader(self.router.getsockopt(zmq.FD))
        self.router.close(0)
        with self._lock:
            for dealer in self._dealers.values():
                dealer.close()
            self._dealers.clear()
