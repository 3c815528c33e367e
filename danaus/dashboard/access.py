"""Who may use a dashboard: its owner, holding a link's one-time token, then the cookie it buys.

The dashboard shows a job as `danaus top` does, so the same rule holds: only
the user who runs it. Three checks, in order, on every request:

1. On Linux, a connection from this host (loopback, or ssh's forwarding, which
   connects from this host) must come from a socket of this user: the kernel
   lists each TCP socket with its owner's uid (``/proc/net/tcp``), and the
   peer's socket is found there by its address. Other users are refused even
   with a valid token or cookie. (psutil's connection table has no uid column,
   and finds the pid of other users' sockets only as root; the kernel's table is
   the direct answer, and one read costs well under a millisecond.)
2. A request carrying ``?token=`` spends that token: each link the dashboard
   prints (or opens) works once. The answer sets a session cookie
   (HttpOnly, SameSite=Strict) and redirects to the same address without the
   token, so the token leaves the address bar and the browser's history.
3. Anything else needs that cookie; without it, 403.

Tokens and cookies are 256-bit random strings made in memory when the
dashboard starts, never written anywhere.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import secrets
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

from aiohttp import web

log = logging.getLogger("danaus.dashboard")

SOCKET_TABLES = (Path("/proc/net/tcp"), Path("/proc/net/tcp6"))

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

REFUSED = (
    "403: this dashboard admits only the user who started it, in a browser that opened "
    "one of the links it printed (each link's token works once)."
)


IP = ipaddress.IPv4Address | ipaddress.IPv6Address


def _address(field: str) -> tuple[IP, int]:
    """An address in the kernel's socket table (``0100007F:1F90``: 32-bit words in host order)."""
    host, _, port = field.partition(":")
    raw = bytes.fromhex(host)
    if sys.byteorder == "little":
        raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    return _plain(ipaddress.ip_address(raw)), int(port, 16)


def _plain(ip: IP) -> IP:
    """An IPv4 address for an IPv4-mapped IPv6 one (``::ffff:127.0.0.1``)."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def peer_uid(peer: tuple[str, int], local: tuple[str, int]) -> int | None:
    """The uid owning the socket at ``peer`` connected to ``local`` on this host, if listed."""
    want_peer = (_plain(ipaddress.ip_address(peer[0])), peer[1])
    want_local = (_plain(ipaddress.ip_address(local[0])), local[1])
    for table in SOCKET_TABLES:
        try:
            rows = table.read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if len(fields) < 8:
                continue
            if _address(fields[1]) == want_peer and _address(fields[2]) == want_local:
                return int(fields[7])
    return None


def _local_peer(request: web.Request) -> tuple[tuple[str, int], tuple[str, int]] | None:
    """(peer, local) addresses of ``request``'s connection when the peer is on this host."""
    transport = request.transport
    if transport is None:
        return None
    peer = transport.get_extra_info("peername")
    local = transport.get_extra_info("sockname")
    if not peer or not local or not isinstance(peer, tuple):
        return None
    peer_ip = _plain(ipaddress.ip_address(peer[0]))
    if not (peer_ip.is_loopback or peer_ip == _plain(ipaddress.ip_address(local[0]))):
        return None
    return (peer[0], peer[1]), (local[0], local[1])


class Access:
    """The dashboard's unspent tokens and its session cookies."""

    def __init__(self, cookie: str, check_peer: bool = True) -> None:
        self.cookie = cookie
        """The cookie's name (the port is part of it: cookies do not tell ports apart)."""
        self.check_peer = check_peer and SOCKET_TABLES[0].exists()
        self._tokens: set[str] = set()
        self._sessions: set[str] = set()

    def new_token(self) -> str:
        """A token for one more link."""
        token = secrets.token_urlsafe(32)
        self._tokens.add(token)
        return token

    def _spend(self, token: str) -> str | None:
        """A new session for ``token`` if it is unspent (then it is spent), else None."""
        if token not in self._tokens:
            return None
        self._tokens.discard(token)
        session = secrets.token_urlsafe(32)
        self._sessions.add(session)
        return session

    def _refuse(self, request: web.Request, why: str) -> web.Response:
        log.warning("dashboard: refused %s %s: %s", request.method, request.path, why)
        return web.Response(status=403, text=REFUSED)

    def middleware(self) -> Callable[[web.Request, Handler], Awaitable[web.StreamResponse]]:
        """An aiohttp middleware that applies the three checks of the module's docstring."""

        @web.middleware
        async def admit(request: web.Request, handler: Handler) -> web.StreamResponse:
            if self.check_peer:
                addresses = _local_peer(request)
                if addresses is not None:
                    uid = peer_uid(*addresses)
                    if uid != os.getuid():
                        return self._refuse(request, f"a connection from uid {uid}")
            token = request.query.get("token")
            if token is not None:
                session = self._spend(token)
                if session is None:
                    return self._refuse(request, "an unknown or spent token")
                rest = {k: v for k, v in request.rel_url.query.items() if k != "token"}
                target = request.rel_url.with_query(rest)
                response = web.Response(status=302, headers={"Location": str(target)})
                response.set_cookie(
                    self.cookie, session, httponly=True, samesite="Strict", path="/"
                )
                return response
            if request.cookies.get(self.cookie) not in self._sessions:
                return self._refuse(request, "no session cookie")
            return await handler(request)

        return admit
