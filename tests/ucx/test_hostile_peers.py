"""Attacks on the ucx data plane with raw ucxx endpoints: each refused, bounded and logged."""

from __future__ import annotations

import asyncio
import contextlib
import os
import struct

import pytest

ucxx = pytest.importorskip("ucxx")

import danaus  # noqa: E402
from danaus import Actor, context, endpoint, this_host  # noqa: E402
from danaus.core import config  # noqa: E402
from danaus.transports import challenge  # noqa: E402
from danaus.transports.ucx import framing  # noqa: E402
from danaus.transports.ucx.plane import _arrived_on  # noqa: E402
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
        transport = context().actor_instance._runtime.transport
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
        host, port = address.rsplit(":", 1)
        return [await ucxx.create_endpoint(host, int(port)) for _ in range(3 * PENDING)]

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


def _listening(pid: int) -> list[tuple[str, int]]:
    """(host, port) of every TCP socket process ``pid`` listens on."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
            if link.startswith("socket:["):
                inodes.add(link[8:-1])
    found = []
    with open(f"/proc/{pid}/net/tcp") as table:
        next(table)
        for row in table:
            fields = row.split()
            if fields[3] == "0A" and fields[9] in inodes:
                hex_host, hex_port = fields[1].split(":")
                host = ".".join(str(b) for b in bytes.fromhex(hex_host)[::-1])
                found.append((host, int(hex_port, 16)))
    return found


def test_a_local_job_listens_on_loopback_except_for_ucxx_s_listener(target):
    """ucxx's listener takes no address; UCX's own sockets stay on ``lo``."""
    _, _, pid, address = target
    ucx_port = int(address.rsplit(":", 1)[1])
    listening = _listening(pid)
    assert ("0.0.0.0", ucx_port) in listening or ("127.0.0.1", ucx_port) in listening
    others = [(host, port) for host, port in listening if port != ucx_port]
    assert others and all(host == "127.0.0.1" for host, _ in others), listening


def test_a_connection_that_arrived_on_another_address_is_refused():
    assert _arrived_on(("127.0.0.1", 5), "127.0.0.1")
    assert not _arrived_on(("192.0.2.7", 5), "127.0.0.1")
    assert not _arrived_on(None, "127.0.0.1")
    assert _arrived_on(("192.0.2.7", 5), "0.0.0.0")
