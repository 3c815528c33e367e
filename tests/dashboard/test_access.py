"""Only the dashboard's owner gets in: a link's token once, then the cookie it bought; other users
never, even holding both."""

from __future__ import annotations

import http.client
import json
import logging
import os
import shutil
import subprocess
import textwrap

import pytest

from danaus.admin.views import JobView, LogsView, ProcView, TraceView
from danaus.dashboard.peers import peer_uid
from danaus.dashboard.sources import SourceInfo, SourceUnavailable

pytestmark = pytest.mark.timeout(60)

NOBODY = 65534
SYSTEM_PYTHON = "/usr/bin/python3"


class FixedSource:
    """A job that never changes: one proc."""

    epoch = 0

    def describe(self) -> SourceInfo:
        return SourceInfo(kind="job", title="a fixed job", details={}, stacks=False)

    def tick(self) -> None:
        pass

    def status(self) -> None:
        return None

    async def snapshot(self) -> JobView:
        procs = [ProcView(proc_id="root", host="h", pid=1)]
        return JobView(1, "tcp", 1.0, 0.001, procs, [], [])

    async def before(self) -> None:
        return None

    async def logs(self, after: int) -> LogsView:
        return LogsView(lines=[], newest=0, skipped=0)

    async def stacks(self, proc: str) -> object:
        raise SourceUnavailable("no stacks here")

    async def profile(self, proc: str, seconds: float, hz: float) -> object:
        raise SourceUnavailable("no stacks here")

    async def trace(self) -> TraceView:
        return TraceView(recording=False, events=[])

    def close(self) -> None:
        pass


def get(port: int, path: str, cookie: str | None = None) -> http.client.HTTPResponse:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    connection.request("GET", path, headers={"Cookie": cookie} if cookie else {})
    response = connection.getresponse()
    response.read()
    connection.close()
    return response


def test_a_link_works_once_and_its_cookie_opens_the_rest(served, caplog):
    server = served(FixedSource())
    port = server.served.port
    with caplog.at_level(logging.WARNING, logger="danaus.dashboard"):
        for path in ("/", "/api/state", "/api/events", "/static/app.js", "/?token=guessed"):
            assert get(port, path).status == 403, path
    assert caplog.text.count("dashboard: refused") == 5
    assert "an unknown or spent token" in caplog.text and "no session cookie" in caplog.text

    token = server.served.link().rpartition("token=")[2]
    bought = get(port, f"/api/state?token={token}")
    assert bought.status == 302 and bought.getheader("Location") == "/api/state"
    cookie = bought.getheader("Set-Cookie")
    assert cookie.startswith(f"danaus-dashboard-{port}=")
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    session = cookie.partition(";")[0]
    state = get(port, "/api/state", session)
    assert state.status == 200 and state.getheader("Content-Type").startswith("application/json")
    assert get(port, "/", session).status == 200
    assert get(port, "/static/app.js", session).status == 200

    assert get(port, f"/?token={token}").status == 403, "a token works once"
    name, _, value = session.partition("=")
    assert get(port, "/api/state", f"{name}={value[:-2]}xx").status == 403
    assert get(port, "/api/state", f"danaus-dashboard-{port + 1}={value}").status == 403


def test_the_state_is_what_the_source_shows(served):
    server = served(FixedSource())
    port = server.served.port
    token = server.served.link().rpartition("token=")[2]
    session = get(port, f"/?token={token}").getheader("Set-Cookie").partition(";")[0]
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    connection.request("GET", "/api/state", headers={"Cookie": session})
    state = json.loads(connection.getresponse().read())
    connection.close()
    assert state["pid"] == 1 and state["hosts"][0]["host"] == "h"
    assert state["hosts"][0]["proc_meshes"][0]["procs"][0]["state"] == "running"


def test_a_connection_is_traced_to_the_user_who_made_it(served):
    server = served(FixedSource())
    connection = http.client.HTTPConnection("127.0.0.1", server.served.port, timeout=10)
    connection.connect()
    mine = connection.sock.getsockname()
    assert peer_uid(mine, ("127.0.0.1", server.served.port)) == os.getuid()
    assert peer_uid(mine, ("127.0.0.1", 1)) is None, "no such connection"
    connection.close()


@pytest.mark.skipif(os.getuid() != 0, reason="needs root, to make a request as another user")
@pytest.mark.skipif(
    shutil.which("setpriv") is None or not os.access(SYSTEM_PYTHON, os.X_OK),
    reason=f"needs setpriv and {SYSTEM_PYTHON}",
)
def test_another_user_is_refused_even_with_a_token_and_a_cookie(served):
    server = served(FixedSource())
    port = server.served.port
    owners = server.served.link().rpartition("token=")[2]
    session = get(port, f"/?token={owners}").getheader("Set-Cookie").partition(";")[0]
    token = server.served.link().rpartition("token=")[2]
    stranger = textwrap.dedent(
        f"""
        import http.client, os
        assert os.getuid() == {NOBODY}
        for path, cookie in (("/?token={token}", None), ("/api/state", {session!r})):
            c = http.client.HTTPConnection("127.0.0.1", {port}, timeout=10)
            c.request("GET", path, headers={{"Cookie": cookie}} if cookie else {{}})
            print(c.getresponse().status)
        """
    )
    done = subprocess.run(
        [
            "setpriv",
            f"--reuid={NOBODY}",
            f"--regid={NOBODY}",
            "--clear-groups",
            SYSTEM_PYTHON,
            "-c",
            stranger,
        ],
        capture_output=True,
        text=True,
        timeout=30,
        cwd="/",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["403", "403"]
    assert get(port, f"/?token={token}").status == 302, "the refused request spent nothing"
    assert get(port, "/api/state", session).status == 200
