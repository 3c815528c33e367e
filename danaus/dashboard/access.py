"""Who may use a dashboard: its owner, holding a link's one-time token, then the cookie it buys.

The dashboard shows a job as `danaus top` does, so the same rule holds: only
the user who runs it. Three checks, in order, on every request:

1. On Linux, a connection from this host (loopback, or ssh's forwarding, which
   connects from this host) must come from a socket of this user: the kernel
   says who owns the peer's socket (`danaus.dashboard.peers`). Other users are
   refused even with a valid token or cookie.
2. A request carrying ``?token=`` spends that token: each link the dashboard
   prints (or opens) works once. The answer sets a session cookie
   (HttpOnly, SameSite=Strict) and redirects to the same address without the
   token, so the token leaves the address bar and the browser's history.
3. Anything else needs that cookie; without it, 403.

Tokens and cookies are 256-bit random strings made in memory when the
dashboard starts, never written anywhere.
"""

from __future__ import annotations

import logging
import os
import secrets
from collections.abc import Awaitable, Callable

from aiohttp import web

from danaus.dashboard import peers

log = logging.getLogger("danaus.dashboard")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

REFUSED = (
    "403: this dashboard admits only the user who started it, in a browser that opened "
    "one of the links it printed (each link's token works once)."
)


def _local_peer(request: web.Request) -> tuple[tuple[str, int], tuple[str, int]] | None:
    """(peer, local) addresses of ``request``'s connection when the peer is on this host."""
    transport = request.transport
    if transport is None:
        return None
    peer = transport.get_extra_info("peername")
    local = transport.get_extra_info("sockname")
    if not peer or not local or not isinstance(peer, tuple):
        return None
    peer_ip = peers.plain(peer[0])
    if not (peer_ip.is_loopback or peer_ip == peers.plain(local[0])):
        return None
    return (peer[0], peer[1]), (local[0], local[1])


class Access:
    """The dashboard's unspent tokens and its session cookies."""

    def __init__(self, cookie: str, check_peer: bool = True) -> None:
        self.cookie = cookie
        """The cookie's name (the port is part of it: cookies do not tell ports apart)."""
        self.check_peer = check_peer and peers.available()
        if check_peer and not self.check_peer:
            log.warning("dashboard: this system cannot say which user connects: tokens only")
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
                    uid = peers.peer_uid(*addresses)
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
