"""The dashboard's web server (aiohttp): the page, its live updates, and what it asks on demand.

While at least one page is open, the server asks its `Source` once per
``interval`` for a snapshot and the new log lines, turns the snapshot into a
`PageState`, and pushes both to every open page as server-sent events
(``/api/events``): ``hello`` (what is shown), ``state``, ``logs``, ``sim``
(the simulator's cursor) and ``status`` (the source cannot answer, and why).
With no page open it asks nothing, so a dashboard left running costs the job
nothing. A page that falls behind is disconnected; its browser reconnects and
starts afresh.

On demand: one proc's stacks (``/api/stacks``), a profile for a flame graph
(``/api/profile``), the trace as Perfetto JSON (``/api/trace.json``), and the
report files (``/api/reports``, ``/reports/N/name``). Every request passes
`Access` first. The page and its scripts are files of this package
(``static/``): nothing is fetched from elsewhere.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.resources
import json
import logging
from pathlib import Path

import msgspec
from aiohttp import web

from danaus.dashboard.access import Access
from danaus.dashboard.logs import LogShelf
from danaus.dashboard.page import PageModel
from danaus.dashboard.reports import ReportShelf
from danaus.dashboard.simulated import SimSource
from danaus.dashboard.sources import Source, SourceUnavailable

log = logging.getLogger("danaus.dashboard")

INTERVAL = 1.0
"""Seconds between snapshots while a page is open."""
KEEP_ALIVE = 15.0
"""Seconds between comments on an idle event stream, so that proxies keep it open."""
BACKLOG = 32
"""Events waiting for one page before it counts as fallen behind."""
PROFILE_SECONDS = 3.0
PROFILE_HZ = 100.0
STATIC = Path(str(importlib.resources.files("danaus.dashboard") / "static"))
SECURITY_HEADERS = {
    # Everything the page needs is served from here; nothing else may load or frame it.
    "Content-Security-Policy": (
        "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; "
        "frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
REPORT_POLICY = "sandbox; default-src 'none'; style-src 'unsafe-inline'; img-src data:"
"""A report page is the user's file, shown apart: no scripts, nothing it can reach here."""

_encode = msgspec.json.Encoder().encode


class _Page:
    """One open page's event stream: what waits to be sent to it."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[bytes] = asyncio.Queue(BACKLOG)
        self.behind = False

    def push(self, event: bytes) -> None:
        try:
            self.queue.put_nowait(event)
        except asyncio.QueueFull:
            self.behind = True

    def end(self) -> None:
        """End the stream (the server is stopping)."""
        self.behind = True
        with contextlib.suppress(asyncio.QueueFull):
            self.queue.put_nowait(b"")


def _event(name: str, data: bytes) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + data + b"\n\n"


class Dashboard:
    """The server's state: the source, the page model, the kept logs, the open pages."""

    def __init__(
        self,
        source: Source,
        access: Access,
        reports: ReportShelf | None = None,
        interval: float = INTERVAL,
    ) -> None:
        self.source = source
        self.access = access
        self.reports = reports or ReportShelf([])
        self.interval = interval
        self.model = PageModel()
        self.logs = LogShelf()
        self.state: bytes | None = None
        """The latest `PageState`, encoded."""
        self.status: bytes | None = None
        """Why the source did not answer last time, encoded; None once it answers."""
        self.polls = 0
        self._pages: set[_Page] = set()
        self._wake = asyncio.Event()
        self._epoch = source.epoch
        self._poller: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._poller = asyncio.get_running_loop().create_task(self._poll_forever())

    async def end_streams(self) -> None:
        """End every page's event stream, so that the server stops without waiting on them."""
        for page in list(self._pages):
            page.end()

    async def stop(self) -> None:
        if self._poller is not None:
            self._poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._poller
        self.source.close()

    async def _poll_forever(self) -> None:
        while True:
            if not self._pages:
                self._wake.clear()
                await self._wake.wait()
            try:
                await self.poll()
            except Exception:
                log.exception("dashboard: polling failed")
            self._wake.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.interval)

    async def poll(self) -> None:
        """Ask the source once, and push what changed to every open page."""
        source = self.source
        source.tick()
        if source.epoch != self._epoch:
            self._epoch = source.epoch
            self.model = PageModel()
            self.logs.clear()
            self._push("reset", b"{}")
        try:
            before = await source.before()
            view = await source.snapshot()
            logs = await source.logs(self.logs.newest)
        except SourceUnavailable as exc:
            self.status = _encode({"error": str(exc)})
            self._push("status", self.status)
            return
        self.polls += 1
        self.status = None
        if before is not None:
            self.model = PageModel()
            self.model.update(before)
        self.state = _encode(self.model.update(view))
        self._push("state", self.state)
        fresh = self.logs.add(logs.lines)
        if fresh:
            self._push("logs", _encode(fresh))
        status = source.status()
        if status is not None:
            self._push("sim", _encode(status))

    def _push(self, name: str, data: bytes) -> None:
        event = _event(name, data)
        for page in list(self._pages):
            page.push(event)

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self.access.middleware(), _headers])
        app.router.add_get("/", self._index)
        app.router.add_static("/static/", STATIC)
        app.router.add_get("/api/events", self._events)
        app.router.add_get("/api/state", self._state)
        app.router.add_get("/api/stacks", self._stacks)
        app.router.add_get("/api/profile", self._profile)
        app.router.add_get("/api/trace.json", self._trace)
        app.router.add_get("/api/reports", self._reports)
        app.router.add_get("/reports/{number:\\d+}/{name:.*}", self._report)
        app.router.add_post("/api/sim", self._sim)
        app.on_startup.append(lambda _: self.start())
        app.on_shutdown.append(lambda _: self.end_streams())
        app.on_cleanup.append(lambda _: self.stop())
        return app

    async def _index(self, request: web.Request) -> web.StreamResponse:
        return web.FileResponse(STATIC / "index.html")

    async def _events(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream",
                "Cache-Control": "no-store",
                "X-Accel-Buffering": "no",
            }
        )
        await response.prepare(request)
        page = _Page()
        hello = {"source": self.source.describe(), "interval": self.interval}
        await response.write(_event("hello", _encode(hello)))
        for name, data in (("state", self.state), ("status", self.status)):
            if data is not None:
                await response.write(_event(name, data))
        if self.logs.lines:
            await response.write(_event("logs", _encode(list(self.logs.lines))))
        status = self.source.status()
        if status is not None:
            await response.write(_event("sim", _encode(status)))
        self._pages.add(page)
        self._wake.set()
        try:
            while not page.behind:
                try:
                    event = await asyncio.wait_for(page.queue.get(), KEEP_ALIVE)
                except asyncio.TimeoutError:
                    event = b": idle\n\n"
                if event:
                    await response.write(event)
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self._pages.discard(page)
        return response

    async def _state(self, request: web.Request) -> web.Response:
        if self.state is None:
            await self.poll()
        if self.state is None:
            return _error(409, json.loads(self.status or b'{"error": "no state yet"}')["error"])
        return web.Response(body=self.state, content_type="application/json")

    async def _stacks(self, request: web.Request) -> web.Response:
        proc = request.query.get("proc", "")
        try:
            return _json(await self.source.stacks(proc))
        except SourceUnavailable as exc:
            return _error(409, str(exc))

    async def _profile(self, request: web.Request) -> web.Response:
        proc = request.query.get("proc", "")
        try:
            seconds = float(request.query.get("seconds", PROFILE_SECONDS))
            hz = float(request.query.get("hz", PROFILE_HZ))
        except ValueError:
            return _error(400, "seconds and hz are numbers")
        try:
            return _json(await self.source.profile(proc, seconds, hz))
        except SourceUnavailable as exc:
            return _error(409, str(exc))

    async def _trace(self, request: web.Request) -> web.Response:
        from danaus.chaos.export import to_perfetto

        try:
            trace = await self.source.trace()
        except SourceUnavailable as exc:
            return _error(409, str(exc))
        if not trace.recording:
            return _error(
                409,
                "this job does not record its trace: start it with `danaus run --trace FILE` "
                "or configure(trace=True)",
            )
        body = await asyncio.to_thread(lambda: json.dumps(to_perfetto(trace.events)).encode())
        response = web.Response(body=body, content_type="application/json")
        if "download" in request.query:
            name = f"danaus-{self.source.describe().kind}-trace.json"
            response.headers["Content-Disposition"] = f'attachment; filename="{name}"'
        return response

    async def _reports(self, request: web.Request) -> web.Response:
        return _json(self.reports.listing())

    async def _report(self, request: web.Request) -> web.StreamResponse:
        path = self.reports.file(int(request.match_info["number"]))
        if path is None or path.name != Path(request.match_info["name"]).name:
            return _error(404, "no such report (the list changed: reload it)")
        response = web.FileResponse(path)
        response.headers["Content-Security-Policy"] = REPORT_POLICY
        return response

    async def _sim(self, request: web.Request) -> web.Response:
        source = self.source
        if not isinstance(source, SimSource):
            return _error(409, "this dashboard shows a running job, not a simulation")
        try:
            order = await request.json()
            action = order["action"]
            if action == "run":
                source.start(int(order["seed"]))
            elif action == "seek":
                source.seek(float(order["at"]))
            elif action in ("play", "pause", "follow"):
                getattr(source, action)()
            else:
                return _error(400, f"unknown action {action!r}")
        except (KeyError, TypeError, ValueError) as exc:
            return _error(400, f"a bad order: {exc!r}")
        except SourceUnavailable as exc:
            return _error(409, str(exc))
        self._wake.set()
        return _json(source.status())


@web.middleware
async def _headers(request: web.Request, handler: object) -> web.StreamResponse:
    response = await handler(request)  # type: ignore[operator]
    for name, value in SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)
    return response


def _json(value: object) -> web.Response:
    return web.Response(body=_encode(value), content_type="application/json")


def _error(status: int, message: str) -> web.Response:
    return web.Response(
        status=status, body=_encode({"error": message}), content_type="application/json"
    )
