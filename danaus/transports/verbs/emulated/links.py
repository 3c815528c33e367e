"""The cables between emulated devices: a Unix socket per pair and direction, and packet I/O.

A device listens on the abstract Unix socket its GID names. It sends every
packet to another device on a connection it opened itself (so the packets of
one queue pair stay in order), which starts with its GID, and it reads the
packets others send on the connections they opened to it. Reading a packet is
reading its header, then its payload straight into the memory the device
chose for it (or into a scratch buffer, to throw it away).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import selectors
import socket
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from danaus.transports.verbs.emulated.wire import GID_BYTES, Header, socket_name

log = logging.getLogger("danaus.verbs.emulated")

SOCKET_BUFFER = 4 << 20
READS_PER_WAKE = 64


@dataclass
class Link:
    """One socket to another device: ours to send on, or theirs that we receive on."""

    sock: socket.socket
    gid: bytes | None
    outgoing: deque[memoryview] = field(default_factory=deque)
    hello: bytearray = field(default_factory=lambda: bytearray(GID_BYTES))
    hello_filled: int = 0
    header: bytearray = field(default_factory=lambda: bytearray(Header.SIZE))
    header_filled: int = 0
    target: memoryview | None = None
    remaining: int = 0
    position: int = 0
    wanted: Callable[[], bool] = lambda: True
    done: Callable[[], None] | None = None
    last_progress: float = field(default_factory=time.monotonic)
    writing: bool = False


class Links:
    """One device's connections, served from its thread (under its lock)."""

    def __init__(
        self,
        gid: bytes,
        selector: selectors.BaseSelector,
        arrived: Callable[[Link, Header], None],
    ) -> None:
        self._gid = gid
        self._selector = selector
        self._arrived = arrived
        self._links: dict[bytes, Link] = {}
        """Our own connections, one per remote device: every packet we send goes on one."""
        self._scratch = memoryview(bytearray(1 << 16))
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        self._listener.bind(socket_name(gid))
        self._listener.listen(256)
        self._listener.setblocking(False)
        selector.register(self._listener, selectors.EVENT_READ, self._accept)

    def busy_towards(self, gid: bytes, within: float) -> bool:
        """Whether bytes still wait to go to ``gid``, and some went in the last ``within`` s."""
        link = self._links.get(gid)
        if link is None or not link.outgoing:
            return False
        return time.monotonic() - link.last_progress < within

    def close(self) -> None:
        for key in list(self._selector.get_map().values()):
            if isinstance(key.fileobj, socket.socket):
                key.fileobj.close()
        self._links.clear()

    def _accept(self, _: int) -> None:
        for _ in range(READS_PER_WAKE):
            try:
                sock, _ = self._listener.accept()
            except BlockingIOError:
                return
            sock.setblocking(False)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SOCKET_BUFFER)
            link = Link(sock, None)
            reader = functools.partial(self._reader, link)
            self._selector.register(sock, selectors.EVENT_READ, reader)

    def _link(self, gid: bytes) -> Link | None:
        """Our connection to device ``gid``; None if no device answers there."""
        link = self._links.get(gid)
        if link is not None:
            return link
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SOCKET_BUFFER)
        try:
            sock.connect(socket_name(gid))
        except OSError:
            sock.close()
            return None
        sock.setblocking(False)
        link = self._links[gid] = Link(sock, gid)
        link.outgoing.append(memoryview(self._gid))
        self._selector.register(sock, selectors.EVENT_READ, lambda m: self._io(link, m))
        return link

    def _reader(self, link: Link, _: int) -> None:
        self._read(link)

    def _io(self, link: Link, mask: int = selectors.EVENT_READ) -> None:
        if mask & selectors.EVENT_WRITE:
            self._flush_link(link)
        if mask & selectors.EVENT_READ and link.sock.fileno() >= 0:
            self._read(link)

    def _drop_link(self, link: Link) -> None:
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(link.sock)
        link.sock.close()
        if link.gid is not None and self._links.get(link.gid) is link:
            del self._links[link.gid]

    def send(self, gid: bytes, header: Header, payload: memoryview | None = None) -> bool:
        """Queue a packet for device ``gid``; False if no device answers there."""
        link = self._link(gid)
        if link is None:
            return False
        link.outgoing.append(memoryview(header.pack()))
        if payload is not None and payload.nbytes:
            link.outgoing.append(payload)
        self._flush_link(link)
        return True

    def _flush_link(self, link: Link) -> None:
        while link.outgoing:
            try:
                sent = link.sock.send(link.outgoing[0])
            except BlockingIOError:
                break
            except OSError:
                self._drop_link(link)
                return
            link.last_progress = time.monotonic()
            if sent < link.outgoing[0].nbytes:
                link.outgoing[0] = link.outgoing[0][sent:]
            else:
                link.outgoing.popleft()
        wants = bool(link.outgoing)
        if wants != link.writing:
            link.writing = wants
            events = selectors.EVENT_READ | (selectors.EVENT_WRITE if wants else 0)
            self._selector.modify(link.sock, events, lambda m: self._io(link, m))

    def _read(self, link: Link) -> None:
        for _ in range(READS_PER_WAKE):
            payload = link.gid is not None and link.remaining > 0
            try:
                if link.gid is None:
                    count = link.sock.recv_into(memoryview(link.hello)[link.hello_filled :])
                elif payload:
                    count = self._read_payload(link)
                else:
                    view = memoryview(link.header)[link.header_filled :]
                    count = link.sock.recv_into(view)
            except BlockingIOError:
                return
            except OSError:
                count = 0
            if count == 0:
                self._drop_link(link)
                return
            if link.gid is None:
                link.hello_filled += count
                if link.hello_filled == GID_BYTES:
                    link.gid = bytes(link.hello)
            elif payload:
                if not link.remaining:
                    done, link.done, link.target = link.done, None, None
                    if done is not None:
                        done()
            else:
                link.header_filled += count
                if link.header_filled == Header.SIZE:
                    link.header_filled = 0
                    try:
                        header = Header.unpack(link.header)
                    except ValueError:
                        log.error("emulated NIC: a malformed packet; the link is closed")
                        self._drop_link(link)
                        return
                    self._arrived(link, header)

    def _read_payload(self, link: Link) -> int:
        if link.target is not None and not link.wanted():
            link.target = None
        if link.target is None:
            count = link.sock.recv_into(self._scratch[: link.remaining])
        else:
            count = link.sock.recv_into(link.target[link.position : link.position + link.remaining])
            link.position += count
        link.remaining -= count
        return count

    def expect_payload(
        self,
        link: Link,
        length: int,
        target: memoryview | None,
        done: Callable[[], None] | None = None,
        wanted: Callable[[], bool] = lambda: True,
    ) -> None:
        """Put the next ``length`` bytes in ``target`` (None: throw them away), then ``done``."""
        if not length:
            if done is not None:
                done()
            return
        link.target, link.remaining, link.position = target, length, 0
        link.wanted = wanted
        link.done = done
