"""Attacks on the ucx data plane with raw ucxx endpoints: each refused, bounded and logged."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import socket
import struct
import traceback

import psutil
import pytest

ucxx = pytest.importorskip("ucxx")

import danaus  # noqa: E402
from danaus import Actor, context, endpoint, this_host  # noqa: E402
from danaus.core import config  # noqa: E402
from danaus.transports import challenge  # noqa: E402
from danaus.transports.ucx import framing  # noqa: E402
from tests.tcp.conftest import wait_until  # noqa: E402
from tests.tcp.test_hostile_peers import rss_mib  # noqa: E402

TIMEOUT = 3.0
PENDING = 4


class Target(Actor):
    """Echoes, and reports its pid, its ucx address and what its process logged."""

    def __init__(self) -> None:
        import logging

        self.records: list[str] = []
        handler = logging.Handler()
        handler.emit = lambda record: self.records.append(record.getMessage())
        logging.getLogger("danaus").addHandler(handler)

    @endpoint
    def echo(self, value: object) -> object:
        return value

    @endpoint
    def facts(self) -> tuple[int, str]:
        transport = context().actor_instance.runtime.transport
        return os.getpid(), transport.data.ucx().listening().result(30)

    @endpoint
    def logged(self) -> list[str]:
        return list(self.records)


@pytest.fixture
def target():
    danaus.configure(transport="ucx", handshake_timeout=TIMEOUT, max_pending_handshakes=PENDING)
    try:
        mesh = this_host().spawn_procs(per_host={"w": 2}).spawn("target", Target)
        first = mesh.slice(w=0)
        yield mesh, first, *first.facts.call_one().get(timeout=60)
    finally:
        danaus.shutdown()


def on_ucx(coro, timeout: float = 60):
    """Run ``coro`` on this process's UCX loop (where ucxx endpoints must live)."""
    loop = config.installed().transport.data.ucx().loop
    return asyncio.run_coroutine_threadsafe(coro, loop).result(timeout)


async def connect(address: str):
    """A raw ucxx endpoint to ``address``, greeted by the proc there."""
    host, port = address.rsplit(":", 1)
    ep = await ucxx.create_endpoint(host, int(port))
    greeting = bytearray(challenge.GREETING_BYTES)
    await ep.recv(greeting)
    challenge.read_greeting(greeting)
    return ep, bytes(greeting)


async def closed(ep) -> bool:
    """Whether the proc closes ``ep`` within 10 s (what it still sends is read and dropped)."""

    async def drain() -> None:
        while True:
            await ep.recv(bytearray(64))

    try:
        await asyncio.wait_for(drain(), 10)
    except asyncio.TimeoutError:
        return False
    except Exception:
        return True
    return False


def refusals(mesh) -> list[str]:
    return [line for line in mesh.logged.call_one().get(timeout=30) if "refused" in line]


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_strangers_sending_huge_frames_are_refused_before_anything_is_read(target):
    """The first strangers cost the proc UCX's own set-up (some 25-40 MiB, whatever they
    send); the same attacks again, with a frame eight times larger, cost far less than
    that frame (UCX grows a pool by a few MiB for it; nothing of it is read)."""
    mesh, first, pid, address = target

    async def attack(frames: list[bytes]) -> bool:
        ep, _ = await connect(address)
        with contextlib.suppress(Exception):  # the proc may hang up mid-send
            await (ep.send(frames[0]) if len(frames) == 1 else ep.send_multi(frames))
        refused = await closed(ep)
        ep.abort()
        return refused

    async def attacks(huge: int) -> list[bool]:
        return [
            await attack([struct.pack("<IQQ", 2, 1 << 62, 1 << 62)]),  # it crashed ucxx
            await attack([bytes(huge)]),  # far more than an answer
            await attack([bytes(64), bytes(1 << 20)]),
        ]

    assert on_ucx(attacks(8 << 20)) == [True, True, True]
    before = rss_mib(pid)
    assert on_ucx(attacks(64 << 20)) == [True, True, True]
    assert os.path.exists(f"/proc/{pid}")
    assert rss_mib(pid) - before < 16
    assert first.echo.call_one(1).get(timeout=30) == 1
    assert "127.0.0.1" in refusals(first)[0]
    assert list(mesh.echo.call(2).get(timeout=30).values()) == [2, 2]


def test_unanswered_challenges_are_capped_and_time_out(target):
    mesh, first, pid, address = target
    baseline = open_fds(pid)

    async def flood() -> list:
        """Endpoints that got through to the challenge (the rest were refused at once, which
        their side sees as a reset, or as no peer information in time)."""
        host, port = address.rsplit(":", 1)
        silent = []
        for _ in range(3 * PENDING):
            try:
                silent.append(await ucxx.create_endpoint(host, int(port)))
            except (ucxx.exceptions.UCXError, asyncio.TimeoutError) as refused:
                traceback.clear_frames(refused.__traceback__)  # they hold ucxx's context
        return silent

    silent = on_ucx(flood())
    try:
        assert first.echo.call_one(3).get(timeout=30) == 3
        wait_until(lambda: refusals(first), 10, "a refusal logged")
        deadline_passed = [on_ucx(closed(ep)) for ep in silent]
        assert all(deadline_passed), "a stranger kept its connection past the deadline"
    finally:
        for ep in silent:
            with contextlib.suppress(Exception):
                ep.abort()
    wait_until(lambda: open_fds(pid) <= baseline + 2, 10, "the strangers' descriptors closed")
    assert list(mesh.echo.call(4).get(timeout=30).values()) == [4, 4]


def test_a_member_declaring_a_huge_message_is_refused_unread_and_the_proc_lives(target):
    """Nothing is allocated for it: its frames, if they ever came, would be dropped."""
    _, first, pid, address = target
    secret = config.installed().keys.secret

    def refused() -> bool:
        return any("refused a message" in line for line in first.logged.call_one().get())

    async def member() -> None:
        ep, greeting = await connect(address)
        own = challenge.Ephemeral()
        answer = challenge.answer(secret, b"member", greeting, own)
        await ep.send(answer)
        welcome = bytearray(challenge.WELCOME_BYTES)
        await ep.recv(welcome)
        challenge.check_welcome(secret, welcome, greeting, answer, own)
        await ep.send(framing.header([1 << 62, 1 << 62]))
        await asyncio.sleep(0.5)  # what it sent is read before it goes
        ep.abort()

    on_ucx(member())
    wait_until(refused, 10, "the message refused")
    assert os.path.exists(f"/proc/{pid}")
    assert first.echo.call_one(5).get(timeout=30) == 5


def _other_address() -> str | None:
    """An IPv4 address of this host other than loopback, if it has one."""
    for addresses in psutil.net_if_addrs().values():
        for address in addresses:
            if address.family == socket.AF_INET and not address.address.startswith("127."):
                return address.address
    return None


def test_the_listener_takes_connections_to_the_job_s_address_only(target):
    """ucxx's listener listens on every interface; a local job's takes loopback's only."""
    _, first, _, address = target
    other = _other_address()
    if other is None:
        pytest.skip("this host has no address but loopback")
    port = int(address.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=5):
        pass
    with socket.socket() as stranger:
        stranger.settimeout(1.0)
        with pytest.raises(OSError):  # unanswered (a timeout), or refused
            stranger.connect((other, port))
    assert first.echo.call_one(1).get(timeout=30) == 1


def _cut_off(connection: socket.socket) -> bool:
    """Whether the proc has closed its end of ``connection`` (a non-blocking socket)."""
    try:
        return connection.recv(1) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def all_cut_off(connections: list[socket.socket]) -> bool:
    return all(_cut_off(connection) for connection in connections)


def test_floods_of_silent_connections_are_cut_logged_and_leak_no_descriptor(target):
    """Raw TCP connections that never make a UCX connection request: UCX would keep them
    until their peer hangs up. Each flood is cut (beyond max_pending_handshakes at once,
    the rest after handshake_timeout), each refusal logged with the peer's address, and
    the proc's descriptors come back to where they were, flood after flood."""
    mesh, first, pid, address = target
    port = int(address.rsplit(":", 1)[1])
    proc = psutil.Process(pid)
    baseline = proc.num_fds()
    for _ in range(3):
        flood = []
        for _ in range(200):
            connection = socket.create_connection(("127.0.0.1", port), timeout=5)
            connection.setblocking(False)
            flood.append(connection)
        try:
            wait_until(functools.partial(all_cut_off, flood), 4 * TIMEOUT, "every connection cut")
        finally:
            for connection in flood:
                connection.close()
        wait_until(lambda: proc.num_fds() <= baseline, 10, "the descriptors closed")
    assert any(
        "refused a connection from 127.0.0.1: " in line and "proving themselves" in line
        for line in refusals(first)
    )
    assert list(mesh.echo.call(2).get(timeout=30).values()) == [2, 2]


def test_a_ucx_peer_that_never_exchanges_peer_information_is_refused_by_name(target):
    """A UCX-level connection that stops before ucxx's exchange of peer information: ucxx
    alone would log a traceback of its own; the proc logs a refusal with its address."""
    _, first, _, address = target
    host, port = address.rsplit(":", 1)

    async def mute() -> object:
        context = ucxx.core._get_ctx()
        context.continuous_ucx_progress()
        return ucxx._lib.libucxx.UCXEndpoint.create(context.worker, host, int(port), True)

    endpoint = on_ucx(mute())
    try:
        wait_until(lambda: refusals(first), 3 * TIMEOUT, "the refusal logged")
    finally:
        endpoint.close_blocking(period=10**9, max_attempts=1)
    [line] = refusals(first)
    assert "refused a connection from 127.0.0.1: it did not prove itself within" in line
    assert first.echo.call_one(7).get(timeout=30) == 7
