"""``danaus dashboard``: serve a job's (or a simulated run's) dashboard, print its link, open it.

It binds loopback unless told otherwise, on a free port unless given one,
and prints a link whose token works once (`danaus.dashboard.access`); each
line it reads (Enter, on a terminal) prints another. A browser is opened only
where one can show a window (a desktop session, macOS, Windows): on a server,
a console browser would take over the terminal, so the link is printed for
the user to open, through an ssh tunnel from their own machine.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import sys
import webbrowser
from collections.abc import Sequence

from aiohttp import web

from danaus.dashboard.access import Access
from danaus.dashboard.reports import ReportShelf
from danaus.dashboard.server import INTERVAL, Dashboard
from danaus.dashboard.sources import Source

HOST = "127.0.0.1"
SHUTDOWN = 2.0
"""Seconds the server gives requests in progress when it stops."""


def can_show_a_window() -> bool:
    """Whether a browser opened here would show a window the user sees."""
    if sys.platform in ("darwin", "win32"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


class Served:
    """A dashboard listening: its address, and links into it."""

    def __init__(self, runner: web.AppRunner, access: Access, host: str, port: int) -> None:
        self.runner = runner
        self.access = access
        self.host = host
        self.port = port

    @property
    def address(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/"

    def link(self) -> str:
        """A new link: the address with a token that works once."""
        return f"{self.address}?token={self.access.new_token()}"

    async def close(self) -> None:
        await self.runner.cleanup()


async def serve(
    source: Source,
    host: str = HOST,
    port: int = 0,
    reports: Sequence[str] = (),
    interval: float = INTERVAL,
) -> Served:
    """Start serving ``source``'s dashboard on ``host``:``port`` (0: a free port)."""
    access = Access(cookie="danaus-dashboard")
    dashboard = Dashboard(source, access, ReportShelf(reports), interval)
    runner = web.AppRunner(
        dashboard.app(), access_log=None, handle_signals=False, shutdown_timeout=SHUTDOWN
    )
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    bound = runner.addresses[0][1]
    access.cookie = f"danaus-dashboard-{bound}"  # cookies do not tell ports apart
    return Served(runner, access, host, bound)


def _say_how(served: Served, what: str) -> None:
    print(f"danaus dashboard of {what}")
    print(f"  open {served.link()}")
    print("  (each link works once, in one browser, which keeps a cookie; Enter prints another)")
    if served.host in ("127.0.0.1", "localhost", "::1"):
        here = socket.gethostname()
        print(
            f"  from your own machine: ssh -N -L {served.port}:127.0.0.1:{served.port} {here}"
            f"  then open the link there"
        )
    print("  Ctrl-C stops it", flush=True)


async def run(
    source: Source,
    host: str = HOST,
    port: int = 0,
    reports: Sequence[str] = (),
    interval: float = INTERVAL,
    open_browser: bool = True,
) -> None:
    """Serve until cancelled (Ctrl-C), printing links, and opening one if a browser can."""
    served = await serve(source, host, port, reports, interval)
    _say_how(served, source.describe().title)
    loop = asyncio.get_running_loop()
    if open_browser and can_show_a_window():
        await asyncio.to_thread(webbrowser.open, served.link())
    def another_link() -> None:
        if sys.stdin.readline():
            print(f"  open {served.link()}", flush=True)
        else:
            loop.remove_reader(sys.stdin)

    if sys.stdin is not None and not sys.stdin.closed:
        # A file or /dev/null cannot be watched (EPERM): then there is nobody to ask anyway.
        with contextlib.suppress(OSError):
            loop.add_reader(sys.stdin, another_link)
    try:
        await asyncio.Event().wait()
    finally:
        with contextlib.suppress(Exception):
            loop.remove_reader(sys.stdin)
        await served.close()
