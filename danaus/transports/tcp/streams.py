"""The tcp data plane: core messages on TCP connections of their own, sealed per record.

Each proc listens on a TCP socket, and on a Unix socket of the abstract
namespace that only processes of its own network namespace (its host) can reach;
a proc that sends to a peer opens one connection to it, which carries only that
proc's messages to that peer, in the order sent. It tries the peer's Unix socket
first, which on the same host spares every message the TCP stack (a bare round
trip between two processes: about 27 µs instead of 45 µs on a small VM), and the
TCP socket when that one cannot be reached (a peer on another host, or in
another network namespace). A connection first passes the challenge of
`danaus.transports.challenge` (fixed-size messages under a deadline, at most
``max_pending_handshakes`` strangers at once, every refusal logged), which also
agrees the connection's session key; then it carries records
(`danaus.transports.tcp.records`): AES-GCM with the job's ``encrypt`` (the
default), in clear with ``encrypt=False``.

On a Unix socket, the connecting proc then passes a ring of memory it shares
with the peer (`danaus.transports.tcp.ring`; on x86-64), which the peer checks
and maps as part of admitting the connection, under the same deadline. The
chunk records of large messages are sealed into the ring when it has room, and
the socket carries only their lengths in their place: the bytes cross from one
proc to the other without the kernel's two copies through the socket. A record
the ring has no room for goes on the socket as before; the sender never waits.

No thread stands between a message and the kernel. The thread that sends seals
the message and writes it itself, without blocking; whatever the socket does
not take at once is written by the runtime loop's thread when the socket is
writable, in order, sealing large messages chunk by chunk as it goes. The
runtime loop's thread reads every connection: each wake-up reads what is there
(many small messages per system call) and hands each complete message to the
runtime. Control messages, heartbeats and RDMA transfers are elsewhere (the
zmq control plane, on the I/O thread), so nothing here can delay them.
"""

from __future__ import annotations

import asyncio
import contextlib

# socket.getaddrinfo imports the idna codec at its first call with a host name (about 1 ms
# of CPU), which every proc makes: imported here, a fork server imports it once for all.
import encodings.idna  # noqa: F401
import logging
import mmap
import os
import secrets
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

from danaus.core.settings import Limits
from danaus.transports import challenge
from danaus.transports.deadlines import within
from danaus.transports.tcp import ring
from danaus.transports.tcp.buffers import BufferCache, allocate
from danaus.transports.tcp.peers import Peers
from danaus.transports.tcp.records import (
    LENGTH,
    RING_RECORD,
    Assembly,
    Cipher,
    RecordError,
    Refusal,
    in_ring,
    inline_record,
    message_records,
)
from danaus.transports.tcp.refusals import RefusalLog
from danaus.transports.tcp.security import JobKeys

log = logging.getLogger("danaus.tcp")

READ_BYTES = 256 * 1024
"""The read buffer of a connection: records that fit are read many at a time."""
READ_BUDGET = 4 * 1024 * 1024
"""Bytes one wake-up reads from one connection before the loop serves others."""
UNIX_SEND_BUFFER = 4 * 1024 * 1024
"""Bytes a Unix socket holds before a send would block, as asked (the kernel caps it at
``net.core.wmem_max``): a 1 MiB argument is written by the sending thread at once, not
mostly by the loop's thread as the peer drains a 208 KiB buffer (64 MiB: about 8% faster)."""
LEAD_CHUNK_BYTES = 256 * 1024
"""With encryption, the size of the records that carry a large message's first MiB
(`records.LEAD_BYTES`): the peer opens one while this side seals the next, so a 1 MiB
argument's round trip is about a tenth shorter than in one record. Shorter records cost
more than they save here: each wakes the peer, and those that fit the read buffer are
copied within it."""
WRITE_BATCH = 1024 * 1024
"""Bytes handed to the kernel in one call, at most."""
WRITE_BUFFERS = 512
"""Buffers handed to the kernel in one call, at most (below the system's IOV_MAX)."""
RETRY_PAUSE = 0.05
RETRY_PAUSE_MAX = 1.0
KEPT_BYTES = 256 * 1024 * 1024
"""Bytes of received large messages' buffers a connection keeps to fill again (`BufferCache`)."""
STOP_LINGER = 1.0
"""Seconds a stopping plane gives its messages to reach the kernel: first those still
waiting for an address or a connection (`StreamPlane.drain`), then the rest."""
DRAIN_POLL = 0.002


LOCAL_PREFIX = "local:"
"""How a data address names its Unix socket (after the TCP address and a comma)."""


def parse_address(address: str) -> tuple[str, int, str | None]:
    """``tcp://host:port[,local:NAME]`` as a host, a port and the abstract socket name, if any.

    An IPv6 host is in brackets. Raises `ValueError` for anything else.
    """
    tcp, _, local = address.partition(",")
    host, _, port = tcp.removeprefix("tcp://").rpartition(":")
    if local and not local.startswith(LOCAL_PREFIX):
        raise ValueError(f"not a data address: {address!r}")
    return host.strip("[]"), int(port), local.removeprefix(LOCAL_PREFIX) or None


def _format_address(host: str, port: int, local: str) -> str:
    tcp = f"tcp://[{host}]:{port}" if ":" in host else f"tcp://{host}:{port}"
    return f"{tcp},{LOCAL_PREFIX}{local}"


def _listen(bind_host: str) -> socket.socket:
    family, kind, proto, _, where = socket.getaddrinfo(bind_host, 0, type=socket.SOCK_STREAM)[0]
    listener = socket.socket(family, kind, proto)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(where)
    listener.listen(socket.SOMAXCONN)
    listener.setblocking(False)
    return listener


def _listen_local(proc: str) -> tuple[socket.socket, str]:
    """A listening Unix socket of the abstract namespace, and its name (unguessable)."""
    name = f"danaus-{proc[:40]}-{secrets.token_hex(8)}"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind("\0" + name)
    listener.listen(socket.SOMAXCONN)
    listener.setblocking(False)
    return listener, name


def _tuned(sock: socket.socket) -> socket.socket:
    if sock.family != socket.AF_UNIX:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    else:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, UNIX_SEND_BUFFER)
    sock.setblocking(False)
    return sock


async def _when_ready(
    loop: asyncio.AbstractEventLoop, sock: socket.socket, call: Callable[[], Any], write: bool
) -> Any:
    """``call()`` (a system call on ``sock``), again each time the socket is ready, until it
    does not block."""
    while True:
        try:
            return call()
        except (BlockingIOError, InterruptedError):
            pass
        ready: asyncio.Future[None] = loop.create_future()
        if write:
            loop.add_writer(sock.fileno(), _wake, ready)
        else:
            loop.add_reader(sock.fileno(), _wake, ready)
        try:
            await ready
        finally:
            (loop.remove_writer if write else loop.remove_reader)(sock.fileno())


def _wake(ready: asyncio.Future[None]) -> None:
    if not ready.done():
        ready.set_result(None)


async def _offer_ring(loop: asyncio.AbstractEventLoop, sock: socket.socket) -> ring.Producer | None:
    """Share a new ring with the peer at the other end of Unix socket ``sock``, if possible.

    Sends `ring.OFFER` and the ring's descriptor, or `ring.NO_OFFER` when this
    machine does not use rings or the system cannot make one.
    """
    producer, fd = None, None
    if ring.SUPPORTED and ring.RING_BYTES:
        try:
            producer, fd = ring.create()
        except OSError as exc:
            log.debug("no shared-memory ring for a local connection: %r", exc)
    try:
        if fd is None:
            await _when_ready(loop, sock, lambda: sock.send(ring.NO_OFFER), write=True)
        else:
            await _when_ready(
                loop, sock, lambda: socket.send_fds(sock, [ring.OFFER], [fd]), write=True
            )
    except BaseException:
        if producer is not None:
            producer.close()
        raise
    finally:
        if fd is not None:
            os.close(fd)
    return producer


async def _take_ring(loop: asyncio.AbstractEventLoop, sock: socket.socket) -> ring.Consumer | None:
    """The ring the peer at the other end of Unix socket ``sock`` shares, if any (checked).

    Raises `ring.RingError` for anything but one offer byte with one acceptable
    ring, or the no-offer byte alone.
    """
    data, fds, flags, _ = await _when_ready(
        loop, sock, lambda: socket.recv_fds(sock, 1, 1), write=False
    )
    if not data:
        for fd in fds:
            os.close(fd)
        raise ConnectionError("the peer closed the connection after the challenge")
    if data == ring.NO_OFFER and not fds and not flags & socket.MSG_CTRUNC:
        return None
    if data != ring.OFFER or len(fds) != 1 or flags & socket.MSG_CTRUNC:
        for fd in fds:
            os.close(fd)
        raise ring.RingError("not one shared-memory ring after the challenge")
    return ring.accept(fds[0])


async def _receive_exactly(
    loop: asyncio.AbstractEventLoop, sock: socket.socket, nbytes: int
) -> bytearray:
    data = bytearray(nbytes)
    view = memoryview(data)
    filled = 0
    while filled < nbytes:
        count = await loop.sock_recv_into(sock, view[filled:])
        if count == 0:
            raise ConnectionError("the peer closed the connection during the challenge")
        filled += count
    return data


class StreamPlane:
    """A proc's data connections: one listening socket, one connection per peer sent to.

    Thread-safe: `send`, `resolved`, `forget`. `start` and `stop` run on the
    loop's thread; ``receive`` is called there, ``lookup`` on whichever thread
    sends first to a peer whose address is not known yet. Where peers receive,
    and what waits until that is known, the proc's ``peers`` keep.
    """

    def __init__(
        self,
        proc: str,
        keys: JobKeys,
        bind_host: str,
        limits: Limits,
        loop: asyncio.AbstractEventLoop,
        peers: Peers,
        receive: Callable[[str, list[Any]], None],
        lookup: Callable[[str], None],
        refusals: RefusalLog,
        unreachable: Callable[[str], None],
        refused: Callable[[str, list[Any], str], None],
        broken: Callable[[str, str], None],
    ) -> None:
        self.proc = proc
        self.peers = peers
        self.keys = keys
        self.limits = limits
        self.loop = loop
        self.receive = receive
        self.refused = refused
        """Told of a message refused for its size (its leading frames, and why), in its place
        among its sender's (on the loop's thread)."""
        self.broken = broken
        """Told of a peer whose connection broke while neither end stopped (from any thread):
        messages on it may be lost, so the controller must declare one of the two lost."""
        self._lookup = lookup
        self.unreachable = unreachable
        """Told of a peer that could not be reached: it may be lost, and its messages with it."""
        self.refusals = refusals
        self._listener = _listen(bind_host)
        self._local, local = _listen_local(proc)
        self.address = _format_address(*self._listener.getsockname()[:2], local)
        self._lock = threading.Lock()
        """Held while a message is routed to its connection, or one is opened; the peers' lock
        is taken inside it, never the other way."""
        self._outbound: dict[str, Outbound] = {}
        self._inbound: set[Inbound] = set()
        self._strangers = 0
        self._handshakes: set[asyncio.Task[None]] = set()
        self.stopping = False

    def start(self) -> None:
        """Begin accepting connections (on the loop's thread, or before the loop runs)."""
        for listener in (self._listener, self._local):
            self.loop.add_reader(listener.fileno(), self._accept_ready, listener)

    def on_loop_thread(self) -> bool:
        return asyncio._get_running_loop() is self.loop

    def send(self, dest: str, message: list[Any]) -> None:
        """Send ``message`` (its frames) to ``dest``, from any thread, without blocking."""
        with self._lock:
            outbound = self._outbound.get(dest)
            if outbound is None:
                address = self.peers.data_address(dest)
                if address is None:
                    if self.peers.hold_data(dest, message):
                        self._lookup(dest)
                    return
                outbound = self._open(dest, address)
        outbound.send(message)

    def resolved(self, dest: str) -> None:
        """``dest``'s address is known: what waited for it goes out, in order."""
        with self._lock:
            waited = self.peers.take_data(dest)
            if waited is not None and dest not in self._outbound:
                address, messages = waited
                outbound = self._open(dest, address)
                for message in messages:
                    outbound.send(message)

    def _open(self, dest: str, address: str) -> Outbound:
        outbound = self._outbound[dest] = Outbound(self, dest, address)
        self.call_on_loop(outbound.connect)
        return outbound

    def call_on_loop(self, fn: Callable[[], Any]) -> None:
        if self.on_loop_thread():
            fn()
        elif not self.loop.is_closed():
            self.loop.call_soon_threadsafe(fn)

    def forget(self, dest: str) -> None:
        """``dest`` is lost (its peers know): close its connections, with what they still hold."""
        with self._lock:
            outbound = self._outbound.pop(dest, None)
        if outbound is not None:
            self.call_on_loop(outbound.close)
        self.call_on_loop(lambda: self._close_inbound_from(dest))

    def _close_inbound_from(self, dest: str) -> None:
        for inbound in [i for i in self._inbound if i.peer == dest]:
            inbound.close()

    def _accept_ready(self, listener: socket.socket) -> None:
        while True:
            try:
                conn, peer = listener.accept()
            except BlockingIOError:
                return
            except OSError as exc:
                log.error("proc %s: accepting a data connection failed: %r", self.proc, exc)
                return
            _tuned(conn)
            where = peer[0] if listener is self._listener else "this host (Unix socket)"
            if self._strangers >= self.limits.max_pending_handshakes:
                self._refuse(
                    conn,
                    where,
                    f"{self._strangers} connections are already proving themselves "
                    "(max_pending_handshakes)",
                )
                continue
            self._strangers += 1
            task = self.loop.create_task(self._challenge(conn, where))
            self._handshakes.add(task)
            task.add_done_callback(self._handshakes.discard)

    def _refuse(self, conn: socket.socket, peer: str | None, reason: str) -> None:
        self.refusals.refused(f"proc {self.proc} (data)", peer, reason)
        conn.close()

    async def _challenge(self, conn: socket.socket, peer: str) -> None:
        """Admit ``conn`` once its peer has proved it belongs to the job."""
        timeout = self.limits.handshake_timeout
        try:
            exchange, shared = await within(self._check_peer(conn), timeout)
        except asyncio.TimeoutError:
            self._refuse(conn, peer, f"no answer to the challenge within {timeout:g} s")
            return
        except (challenge.HandshakeError, ring.RingError, OSError) as exc:
            self._refuse(conn, peer, str(exc) or repr(exc))
            return
        finally:
            self._strangers -= 1
        if self.stopping:
            conn.close()
            if shared is not None:
                shared.close()
            return
        inbound = Inbound(self, conn, exchange.proc, self._cipher(exchange), shared)
        self._inbound.add(inbound)
        self.loop.add_reader(conn.fileno(), inbound.readable)

    async def _check_peer(
        self, conn: socket.socket
    ) -> tuple[challenge.Exchange, ring.Consumer | None]:
        """The peer's exchange once it passed the challenge, and (over the Unix socket) the
        ring it shares, if any: nothing but the challenge is read from a stranger."""
        own = challenge.Ephemeral()
        greeting = challenge.greeting(own)
        await self.loop.sock_sendall(conn, greeting)
        answer = await _receive_exactly(self.loop, conn, challenge.ANSWER_BYTES)
        exchange, welcome = challenge.check_answer(self.keys.secret, answer, greeting, own)
        await self.loop.sock_sendall(conn, welcome)
        if conn.family != socket.AF_UNIX:
            return exchange, None
        return exchange, await _take_ring(self.loop, conn)

    def _cipher(self, exchange: challenge.Exchange) -> Cipher:
        return Cipher(exchange.session_key(self.keys.secret) if self.keys.encrypt else None)

    def on_this_host(self, peer: str) -> bool:
        """Whether ``peer`` is connected to this proc over its Unix socket (loop's thread)."""
        return any(inbound.peer == peer and inbound.local for inbound in self._inbound)

    def dropped(self, inbound: Inbound) -> None:
        self._inbound.discard(inbound)

    def unsent(self) -> bool:
        """Whether messages still wait for an address, a connection or the kernel."""
        with self._lock:
            if self.peers.waiting_data():
                return True
            outbound = list(self._outbound.values())
        return any(connection.unsent() for connection in outbound)

    async def drain(self, timeout: float = STOP_LINGER) -> None:
        """Give what is queued up to ``timeout`` seconds to go out: called before `stop`.

        A proc that stops right after it sent (an actor's last words in
        ``__cleanup__``) would otherwise drop messages still waiting for their
        peer's address or connection.
        """
        deadline = self.loop.time() + timeout
        while self.unsent() and self.loop.time() < deadline:
            await asyncio.sleep(DRAIN_POLL)

    def stop(self) -> None:
        """Send what is still queued (for at most `STOP_LINGER` s), then close (loop's thread)."""
        if self.stopping:
            return
        self.stopping = True
        for listener in (self._listener, self._local):
            self.loop.remove_reader(listener.fileno())
            listener.close()
        for task in list(self._handshakes):
            task.cancel()
        with self._lock:
            outbound = list(self._outbound.values())
            self._outbound.clear()
        deadline = time.monotonic() + STOP_LINGER
        for connection in outbound:
            connection.close(deadline)
        for inbound in list(self._inbound):
            inbound.close()


class Outbound:
    """The connection that carries one proc's messages to one peer, in order.

    ``send`` may come from any thread; opening, writing when the socket is
    writable again, and closing happen on the loop's thread. One lock orders
    the messages and the sealing of records (whose numbers are their nonces).
    """

    def __init__(self, plane: StreamPlane, dest: str, address: str) -> None:
        self._plane = plane
        self.dest = dest
        self._address = address
        self._lock = threading.RLock()
        self._sock: socket.socket | None = None
        self._cipher: Cipher | None = None
        self._queue: deque[list[Any]] = deque()
        """Messages not yet begun."""
        self._records: Iterator[list[Any]] | None = None
        """The records of the message being written, sealed as they are taken."""
        self._ready: deque[memoryview] = deque()
        """Sealed bytes not yet taken by the kernel."""
        self._armed = False
        """The loop's thread writes when the socket is writable again."""
        self._closed = False
        self._failed = False
        """The peer stopped taking bytes: it is gone, and its loss will be reported."""
        self._opening: asyncio.Task[None] | None = None
        self._scratch: mmap.mmap | None = None
        """Where the chunks of large messages are sealed, one at a time (made on first use)."""
        self._ring: ring.Producer | None = None
        """Memory shared with a peer on this host, where chunks go when it has room."""

    def send(self, message: list[Any]) -> None:
        with self._lock:
            if self._closed or self._failed:
                return
            if self._idle():
                assert self._cipher is not None
                record = inline_record(message, self._cipher)
                if record is not None:
                    self._write_record(record)
                    return
            self._queue.append(message)
            if self._sock is None or self._armed:
                return
            if not self._write():
                self._arm()

    def unsent(self) -> bool:
        with self._lock:
            waiting = bool(self._queue or self._ready or self._records is not None)
            return waiting and not (self._closed or self._failed)

    def _idle(self) -> bool:
        """Open, with nothing waiting to be written: a message may go straight to the kernel."""
        return (
            self._sock is not None
            and not self._armed
            and not self._ready
            and not self._queue
            and self._records is None
        )

    def _write_record(self, record: list[Any]) -> None:
        """Write one record now; what the kernel does not take waits for the loop's thread."""
        assert self._sock is not None
        try:
            sent = self._sock.sendmsg(record)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError as exc:
            self._broken(exc)
            return
        for buffer in record:
            view = memoryview(buffer).cast("B")
            if sent >= view.nbytes:
                sent -= view.nbytes
            else:
                self._ready.append(view[sent:])
                sent = 0
        if self._ready:
            self._arm()

    # The methods below open streams, on the loop's thread.

    def connect(self) -> None:
        if not self._closed and self._opening is None:
            self._opening = self._plane.loop.create_task(self._connect())

    async def _connect(self) -> None:
        """Connect and pass the challenge; retried while the peer cannot be reached yet.

        A peer that fails the challenge is not tried again: its messages are dropped,
        and the link is reported broken (the controller declares one of the two lost).
        """
        plane = self._plane
        host, port, local = parse_address(self._address)
        pause = RETRY_PAUSE
        while True:
            sock = await self._local(local)
            if sock is None:
                family = socket.AF_INET6 if ":" in host else socket.AF_INET
                sock = _tuned(socket.socket(family, socket.SOCK_STREAM))
            try:
                exchange, shared = await within(
                    self._prove(sock, host, port), plane.limits.handshake_timeout
                )
                break
            except challenge.HandshakeError as exc:
                sock.close()
                log.error("proc %s: %s failed the challenge: %s", plane.proc, self.dest, exc)
                self.close()
                plane.broken(self.dest, f"it failed the challenge: {exc}")
                return
            except (OSError, asyncio.TimeoutError) as exc:
                sock.close()
                if self._closed or plane.stopping:
                    return
                log.warning(
                    "proc %s: connecting to %s failed (%r); again in %.2g s",
                    plane.proc,
                    self.dest,
                    exc,
                    pause,
                )
                plane.unreachable(self.dest)
            await asyncio.sleep(pause)
            pause = min(2 * pause, RETRY_PAUSE_MAX)
        with self._lock:
            if self._closed:
                sock.close()
                if shared is not None:
                    shared.close()
                return
            self._sock = sock
            self._ring = shared
            self._cipher = plane._cipher(exchange)
            if not self._write():
                self._arm()

    async def _local(self, name: str | None) -> socket.socket | None:
        """A socket connected to the peer's Unix socket, if this host has it (else None)."""
        if name is None:
            return None
        sock = _tuned(socket.socket(socket.AF_UNIX, socket.SOCK_STREAM))
        try:
            await self._plane.loop.sock_connect(sock, "\0" + name)
        except OSError:
            sock.close()  # on another host, or in another network namespace
            return None
        return sock

    async def _prove(
        self, sock: socket.socket, host: str, port: int
    ) -> tuple[challenge.Exchange, ring.Producer | None]:
        """Pass the peer's challenge; over a Unix socket, then offer it a ring."""
        plane = self._plane
        if sock.family != socket.AF_UNIX:
            await plane.loop.sock_connect(sock, (host, port))
        greeting = await _receive_exactly(plane.loop, sock, challenge.GREETING_BYTES)
        challenge.read_greeting(greeting)
        own = challenge.Ephemeral()
        answer = challenge.answer(plane.keys.secret, plane.proc.encode(), bytes(greeting), own)
        await plane.loop.sock_sendall(sock, answer)
        welcome = await _receive_exactly(plane.loop, sock, challenge.WELCOME_BYTES)
        exchange = challenge.check_welcome(plane.keys.secret, welcome, bytes(greeting), answer, own)
        if sock.family != socket.AF_UNIX:
            return exchange, None
        return exchange, await _offer_ring(plane.loop, sock)

    # The methods below write, with the lock held.

    def _write(self) -> bool:
        """Hand the kernel what it takes now; True once nothing is left."""
        assert self._sock is not None
        while self._ready or self._take():
            batch = [self._ready[i] for i in range(min(len(self._ready), WRITE_BUFFERS))]
            try:
                sent = self._sock.sendmsg(batch)
            except (BlockingIOError, InterruptedError):
                return False
            except OSError as exc:
                self._broken(exc)
                return True
            self._consume(sent)
        return True

    def _take(self) -> bool:
        """Seal records into `_ready`, up to `WRITE_BATCH` bytes; False if none is left.

        A record sealed into the scratch buffer (a large message's header, or
        a chunk) ends the batch: the next one is sealed there only once the
        kernel has taken this one, and the header reaches the peer before the
        first chunk is sealed. So does a chunk sealed into the ring: its
        descriptor goes out at once, and the peer opens it while this side
        seals the next.
        """
        assert self._cipher is not None
        size = 0
        while size < WRITE_BATCH:
            if self._records is None:
                if not self._queue:
                    break
                self._records = message_records(
                    self._queue.popleft(),
                    self._cipher,
                    self._plane.limits.chunk_bytes,
                    self._scratch_buffer(),
                    LEAD_CHUNK_BYTES if self._cipher.encrypts else None,
                    self._ring.slot if self._ring is not None else None,
                )
            try:
                record = next(self._records, None)
            except ring.RingError as exc:
                log.error("proc %s: %s broke the shared ring: %s", self._plane.proc, self.dest, exc)
                self._broken(exc)
                break
            if record is None:
                self._records = None
                continue
            for buffer in record:
                view = memoryview(buffer).cast("B")
                if view.nbytes:
                    self._ready.append(view)
                    size += view.nbytes
            if in_ring(record) or (
                self._scratch is not None and memoryview(record[0]).obj is self._scratch
            ):
                break
        return bool(self._ready)

    def _scratch_buffer(self) -> mmap.mmap | None:
        if self._cipher is None or not self._cipher.encrypts:
            return None
        if self._scratch is None:
            size = LENGTH.size + self._plane.limits.chunk_bytes + self._cipher.overhead
            # Mapped, not a bytearray, which would be zeroed whole (about 2 ms for 4 MiB) at
            # the first message of every connection, large or not: a page is faulted in when
            # a large message is first sealed there.
            self._scratch = mmap.mmap(-1, size)
        return self._scratch

    def _consume(self, sent: int) -> None:
        ready = self._ready
        while sent:
            head = ready[0]
            if head.nbytes <= sent:
                sent -= head.nbytes
                ready.popleft()
            else:
                ready[0] = head[sent:]
                sent = 0

    def _broken(self, exc: Exception) -> None:
        """The connection broke: drop what is left, and have the controller settle it.

        The peer is gone or going (its loss will be reported), or it closed the
        connection on a message it could not read, or the network cut it: messages
        may have been lost, so it must not go on as if none were. The controller
        declares one of the two procs lost (the peer, unless it is the controller),
        after waiting briefly for a loss already on its way.
        """
        if self._failed:
            return
        log.debug("proc %s: the connection to %s broke: %r", self._plane.proc, self.dest, exc)
        self._failed = True
        self._queue.clear()
        self._ready.clear()
        self._records = None
        if not (self._closed or self._plane.stopping):
            self._plane.broken(self.dest, f"its connection broke: {exc!r}")

    def _arm(self) -> None:
        """Have the loop's thread write the rest when the socket is writable (lock held)."""
        self._armed = True
        self._plane.call_on_loop(self._watch_writable)

    def _watch_writable(self) -> None:
        with self._lock:
            if self._sock is not None and not self._closed:
                self._plane.loop.add_writer(self._sock.fileno(), self._writable)

    def _writable(self) -> None:
        with self._lock:
            if self._sock is None or self._closed:
                return
            if self._write():
                self._plane.loop.remove_writer(self._sock.fileno())
                self._armed = False

    # The methods below close streams, on the loop's thread.

    def close(self, deadline: float | None = None) -> None:
        """Close the connection; with a ``deadline``, send what is left until then first."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._opening is not None and not self._opening.done():
                self._opening.cancel()
            sock, self._sock = self._sock, None
            if sock is None:
                return
            self._plane.loop.remove_writer(sock.fileno())
            if deadline is not None:
                self._linger(sock, deadline)
            sock.close()
            if self._ring is not None:
                self._records = None  # its slots are views of the ring
                self._ring.close()
                self._ring = None

    def _linger(self, sock: socket.socket, deadline: float) -> None:
        self._sock = sock
        try:
            while self._ready or self._take():
                sock.settimeout(max(0.0, deadline - time.monotonic()))
                batch = [self._ready[i] for i in range(min(len(self._ready), WRITE_BUFFERS))]
                self._consume(sock.sendmsg(batch))
        except OSError as exc:
            log.debug("proc %s: %s refused the rest: %r", self._plane.proc, self.dest, exc)
        finally:
            self._sock = None


class Inbound:
    """One authenticated connection from a peer, read on the loop's thread."""

    def __init__(
        self,
        plane: StreamPlane,
        sock: socket.socket,
        peer: str,
        cipher: Cipher,
        shared: ring.Consumer | None = None,
    ) -> None:
        self._plane = plane
        self._sock = sock
        self.peer = peer
        self.local = sock.family == socket.AF_UNIX
        """It came over the Unix socket: the peer runs on this host."""
        self._ring = shared
        """Memory the peer shares with this proc, where it may place chunk records."""
        self._assembly = Assembly(
            cipher,
            plane.limits.frame_bytes + cipher.overhead,
            plane.limits.message_bytes,
            BufferCache(KEPT_BYTES),
            plane.limits.message_limit,
        )
        self._buffer = bytearray(READ_BYTES)
        self._view = memoryview(self._buffer)
        self._start = 0
        self._end = 0
        self._scratch: memoryview | None = None
        """Where encrypted bodies too large for the read buffer are read (made on first use)."""
        self._body: memoryview | None = None
        """A large body being read apart from the read buffer, and how much of it is in."""
        self._body_filled = 0
        self._body_length = b""
        self._in_place = False
        self._closed = False

    def readable(self) -> None:
        budget = READ_BUDGET
        while budget > 0 and not self._closed:
            target = (
                self._body[self._body_filled :]
                if self._body is not None
                else self._view[self._end :]
            )
            try:
                count = self._sock.recv_into(target)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                self._ended(f"it broke: {exc!r}")
                return
            if count == 0:
                self._ended("the peer closed it")
                return
            budget -= count
            try:
                if self._body is not None:
                    self._body_filled += count
                    if self._body_filled == self._body.nbytes:
                        self._body_done()
                else:
                    self._end += count
                    self._records()
            except RecordError as exc:
                log.error(
                    "proc %s rejected a message from %s and closed its connection: %s",
                    self._plane.proc,
                    self.peer,
                    exc,
                )
                self._plane.broken(self.peer, f"it sent what breaks the protocol: {exc}")
                self.close()
            if count < target.nbytes:
                return  # the socket had no more: the loop calls again when it has

    def _records(self) -> None:
        """Take every whole record in the read buffer; begin reading a large one apart."""
        view = self._view
        while self._end - self._start >= LENGTH.size and not self._closed:
            (length,) = LENGTH.unpack_from(view, self._start)
            body_at = self._start + LENGTH.size
            if length & RING_RECORD:
                header = bytes(view[self._start : body_at])
                self._start = body_at
                self._from_ring(header, length & ~RING_RECORD)
                continue
            self._assembly.check_length(length)
            available = self._end - body_at
            if available >= length:
                header = bytes(view[self._start : body_at])
                self._start = body_at + length
                self._deliver(self._assembly.opened(header, view[body_at : self._start]))
                continue
            if LENGTH.size + length > len(self._buffer):
                self._begin_body(bytes(view[self._start : body_at]), length, body_at, available)
            break
        if self._start == self._end:
            self._start = self._end = 0
        elif self._start:
            remaining = self._end - self._start
            self._buffer[:remaining] = view[self._start : self._end]
            self._start, self._end = 0, remaining

    def _from_ring(self, header: bytes, length: int) -> None:
        """Take a chunk record from the shared ring (``header``: its descriptor)."""
        if self._ring is None:
            raise RecordError("a record in shared memory on a connection that shares none")
        self._assembly.check_length(length)
        if not self._assembly.filling:
            raise RecordError("a message header in shared memory (only chunks go there)")
        body = self._ring.record(length)
        try:
            frames = self._assembly.opened(header, body)
        finally:
            body.release()  # no view of the ring outlives the record (an error's traceback)
        self._ring.release()
        self._deliver(frames)

    def _begin_body(self, header: bytes, length: int, body_at: int, available: int) -> None:
        target = self._assembly.direct_target(length)
        self._in_place = target is not None
        if target is None:
            if self._scratch is None:
                self._scratch = allocate(self._assembly.max_record)
            target = self._scratch[:length]
        target[:available] = self._view[body_at : body_at + available]
        self._body, self._body_filled, self._body_length = target, available, header
        self._start = self._end = 0

    def _body_done(self) -> None:
        assert self._body is not None
        body, self._body = self._body, None
        if self._in_place:
            self._deliver(self._assembly.filled_in_place(body.nbytes))
        else:
            self._deliver(self._assembly.opened(self._body_length, body))

    def _deliver(self, frames: list[memoryview] | Refusal | None) -> None:
        if isinstance(frames, Refusal):
            log.error(
                "proc %s refused a message from %s: %s", self._plane.proc, self.peer, frames.reason
            )
            self._plane.refused(self.peer, frames.frames, frames.reason)
        elif frames is not None:
            self._plane.receive(self.peer, frames)

    def _ended(self, why: str) -> None:
        log.debug("proc %s: the connection from %s ended: %s", self._plane.proc, self.peer, why)
        self.close()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(ValueError, OSError):
            self._plane.loop.remove_reader(self._sock.fileno())
        self._sock.close()
        if self._ring is not None:
            self._ring.close()
            self._ring = None
        self._plane.dropped(self)
