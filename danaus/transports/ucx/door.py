"""The door of a proc's UCX plane: its listener, and the connections still proving themselves.

A stranger gets this far and no further:

- The listener takes connections to the job's address only (`confine`; the
  wildcard ``bind_host`` leaves it on every interface, as it does on tcp).
- A TCP connection that UCX accepted but that has not become a UCX connection
  request (one that sends nothing, or anything but UCX's protocol) is UCX's,
  not Danaus's: UCX would hold it until its peer hangs up. So every half
  ``handshake_timeout`` the door looks at this process's connections to the
  listener's port (psutil) and shuts down, at the socket, those that arrived
  on another address, those beyond ``max_pending_handshakes`` and those older
  than ``handshake_timeout``; UCX then sees its peer gone and closes them.
  Asking the kernel for the connections costs milliseconds (it lists every
  TCP socket of the network namespace), so a sweep asks only if the process
  holds a socket it did not hold at the last one, or one was waiting.
- A connection request becomes an endpoint at once (the listener's own
  handler, not ucxx's, so that the door learns its peer's address before
  anything is exchanged), then exchanges ucxx's peer information and answers
  the challenge of `danaus.transports.challenge`, all within
  ``handshake_timeout``, one of at most ``max_pending_handshakes``.

Every refusal goes to ``danaus.security`` with the peer's address. A member
that passed is handed to the plane, which serves it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable
from typing import Any

import psutil
import ucxx
from ucxx._lib import libucxx
from ucxx._lib_async.endpoint import Endpoint
from ucxx._lib_async.exchange_peer_info import exchange_peer_info
from ucxx._lib_async.utils import hash64bits

from danaus.core.settings import Limits
from danaus.transports import challenge
from danaus.transports.deadlines import within
from danaus.transports.tcp.refusals import RefusalLog
from danaus.transports.ucx.addresses import endpoint_addresses
from danaus.transports.ucx.confine import confine, ipv4_of

log = logging.getLogger("danaus.ucx")

Peer = tuple[str, int]
Serve = Callable[[Endpoint, str], Awaitable[None]]
"""Serves a member's endpoint (with its proc id) until the connection ends."""


def _context() -> Any:
    """ucxx's context of this process (ucxx 0.52 has no public handle on it).

    Asked for each time, never kept: ucxx refuses to shut UCX down while
    anything but its own endpoints and listeners refers to it.
    """
    return ucxx.core._get_ctx()


class _Arrival:
    """A connection request that UCX made an endpoint of: its peer, and how to end it."""

    def __init__(self, ucx_endpoint: Any) -> None:
        self.ucx_endpoint = ucx_endpoint
        self.local, self.peer = endpoint_addresses(ucx_endpoint.handle)
        self.endpoint: Endpoint | None = None
        """ucxx's endpoint, once the peer information is exchanged."""

    async def meet(self, timeout: float) -> Endpoint:
        """Exchange ucxx's peer information (the tags each side sends with)."""
        tag = hash64bits("msg_tag", os.urandom(16), self.ucx_endpoint.handle)
        info = await exchange_peer_info(
            endpoint=self.ucx_endpoint, msg_tag=tag, listener=True, connect_timeout=timeout
        )
        tags = {"msg_send": info["msg_tag"], "msg_recv": tag}
        self.endpoint = Endpoint(endpoint=self.ucx_endpoint, ctx=_context(), tags=tags)
        return self.endpoint

    def abort(self) -> None:
        endpoint = self.endpoint or Endpoint(endpoint=self.ucx_endpoint, ctx=_context())
        endpoint.abort()


class Door:
    """A UCX plane's listener and the strangers at it. Runs on the UCX loop's thread."""

    def __init__(
        self,
        where: str,
        secret: bytes,
        bind_host: str,
        limits: Limits,
        refusals: RefusalLog,
        serve: Serve,
    ) -> None:
        self._where = where
        self._secret = secret
        self._address = ipv4_of(bind_host)
        """The one address connections may arrive on (None: any)."""
        self._limits = limits
        self._refusals = refusals
        self._serve = serve
        self._loop = asyncio.get_running_loop()
        self._listener: Any = None
        self._port = 0
        self._arrivals: set[_Arrival] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._strangers = 0
        """Connection requests still proving themselves."""
        self._known: set[Peer] = set()
        """Peers whose connection UCX made an endpoint of (the sweep leaves them alone)."""
        self._ended: set[Peer] = set()
        """Known peers whose endpoint ended: forgotten once UCX has closed their socket."""
        self._raw_since: dict[Peer, float] = {}
        """Accepted TCP connections that are no connection request yet, and since when."""
        self._sweeping: asyncio.TimerHandle | None = None
        self._sockets: set[str] = set()
        """This process's sockets at the last sweep."""

    def open(self) -> int:
        """Listen, on the job's address only; the port."""
        context = _context()
        context.continuous_ucx_progress()
        self._listener = libucxx.UCXListener.create(
            worker=context.worker,
            port=0,
            cb_func=self._requested,
            deliver_endpoint=True,
        )
        self._port = self._listener.port
        if self._address is not None:
            try:
                confine(self._port, self._address)
            except OSError:
                self._listener = None  # never left listening everywhere
                raise
        self._sweeping = self._loop.call_later(self._sweep_interval, self._sweep)
        return self._port

    @property
    def _sweep_interval(self) -> float:
        return self._limits.handshake_timeout / 2

    async def close(self) -> None:
        """Stop listening and end every connection that came in here."""
        if self._sweeping is not None:
            self._sweeping.cancel()
        for arrival in self._arrivals:
            arrival.abort()
        if self._tasks:  # they end once their endpoint is aborted
            await asyncio.wait(self._tasks, timeout=1)
        self._listener = None  # ucxx closes a listener that nothing refers to

    def _requested(self, ucx_endpoint: Any) -> None:
        """UCX made an endpoint of a connection request (on UCX's progress thread)."""
        self._loop.call_soon_threadsafe(self._arrived, ucx_endpoint)

    def _arrived(self, ucx_endpoint: Any) -> None:
        arrival = _Arrival(ucx_endpoint)
        self._arrivals.add(arrival)
        task = self._loop.create_task(self._admit(arrival))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _admit(self, arrival: _Arrival) -> None:
        peer = arrival.peer
        try:
            if peer is None:  # the sweep could not tell it from a stranger's connection
                self._refuse(arrival, "UCX could not tell where it came from")
                return
            self._known.add(peer)
            try:
                await self._admit_known(arrival)
            finally:
                self._ended.add(peer)
        finally:
            self._arrivals.discard(arrival)

    async def _admit_known(self, arrival: _Arrival) -> None:
        local = arrival.local[0] if arrival.local is not None else None
        if self._address is not None and local != self._address:
            # Only in the moment before the listener was confined.
            self._refuse(arrival, f"it arrived on {local}, not on {self._address}")
            return
        if self._strangers >= self._limits.max_pending_handshakes:
            self._refuse(
                arrival,
                f"{self._strangers} connections are already proving themselves "
                "(max_pending_handshakes)",
            )
            return
        timeout = self._limits.handshake_timeout
        self._strangers += 1
        try:
            endpoint, member = await within(self._prove(arrival, timeout), timeout)
        except asyncio.TimeoutError:
            self._refuse(arrival, f"it did not prove itself within {timeout:g} s")
            return
        except Exception as exc:
            self._refuse(arrival, str(exc) or repr(exc))
            return
        finally:
            self._strangers -= 1
        await self._serve(endpoint, member)

    async def _prove(self, arrival: _Arrival, timeout: float) -> tuple[Endpoint, str]:
        """ucxx's endpoint and the proc at the other end, once it proved it is a member."""
        endpoint = await arrival.meet(timeout)
        own = challenge.Ephemeral()
        greeting = challenge.greeting(own)
        await endpoint.send(greeting)
        answer = bytearray(challenge.ANSWER_BYTES)
        await endpoint.recv(answer)
        exchange, welcome = challenge.check_answer(self._secret, answer, greeting, own)
        await endpoint.send(welcome)
        return endpoint, exchange.proc

    def _refuse(self, arrival: _Arrival, reason: str) -> None:
        host = arrival.peer[0] if arrival.peer is not None else None
        self._refusals.refused(self._where, host, reason)
        arrival.abort()

    def _sweep(self) -> None:
        """Shut down the accepted connections that may not wait any longer (see the module)."""
        self._sweeping = self._loop.call_later(self._sweep_interval, self._sweep)
        sockets, held = _sockets(), self._sockets
        self._sockets = sockets
        if sockets <= held and not self._raw_since:
            return  # no connection came in since the last sweep, and none was waiting
        now = time.monotonic()
        present = self._connections()
        self._known -= self._ended - present.keys()
        self._ended &= present.keys()
        raw = {peer: where for peer, where in present.items() if peer not in self._known}
        self._raw_since = {peer: self._raw_since.get(peer, now) for peer in raw}
        room = max(0, self._limits.max_pending_handshakes - self._strangers)
        timeout = self._limits.handshake_timeout
        for rank, peer in enumerate(sorted(self._raw_since, key=self._raw_since.__getitem__)):
            fd, local = raw[peer]
            if self._address is not None and local != self._address:
                reason = f"it arrived on {local}, not on {self._address}"
            elif rank >= room:
                pending = self._strangers + rank
                reason = f"{pending} connections are already proving themselves " + (
                    "(max_pending_handshakes)"
                )
            elif now - self._raw_since[peer] >= timeout:
                reason = f"it made no UCX connection request within {timeout:g} s"
            else:
                continue
            if _cut(fd, peer, self._port):
                self._refusals.refused(self._where, peer[0], reason)
                del self._raw_since[peer]

    def _connections(self) -> dict[Peer, tuple[int, str]]:
        """This process's TCP connections at the listener's port: peer -> (fd, local ip)."""
        found = {}
        for connection in psutil.Process().net_connections("tcp4"):
            if (
                connection.fd >= 0
                and connection.raddr
                and connection.laddr.port == self._port
                and connection.status != psutil.CONN_LISTEN
            ):
                peer = (connection.raddr.ip, connection.raddr.port)
                found[peer] = (connection.fd, connection.laddr.ip)
        return found


def _sockets() -> set[str]:
    """The sockets this process holds (``socket:[inode]``, as /proc names them)."""
    found = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # closed meanwhile
            continue
        if target.startswith("socket:"):
            found.add(target)
    return found


def _cut(fd: int, peer: Peer, port: int) -> bool:
    """Shut down UCX's socket ``fd`` if it still is the connection from ``peer`` to ``port``.

    Only shut down, never closed: UCX owns the descriptor, notices that its peer
    is gone and closes it itself, so no number it still uses is freed under it.
    """
    try:
        with socket.socket(fileno=os.dup(fd)) as connection:
            if connection.getpeername()[:2] != peer or connection.getsockname()[1] != port:
                return False
            connection.shutdown(socket.SHUT_RDWR)
    except OSError:
        return False
    return True
