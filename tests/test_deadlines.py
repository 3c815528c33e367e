"""Handshake deadlines count only the time the proc's own loop could run."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Awaitable, Callable

import pytest

from danaus.transports.deadlines import within


def _run(main: Awaitable[object]) -> object:
    """Run ``main`` on a real selector loop, whichever transport an earlier test chose."""
    with asyncio.Runner(loop_factory=asyncio.SelectorEventLoop) as runner:
        return runner.run(main)


async def _answer_after_a_stall(stall: float, deadline: Callable[..., Awaitable[bytes]]) -> bytes:
    """A two-message exchange with a peer, under ``deadline`` (0.5 s), while this loop is
    stalled for ``stall`` seconds (as by another thread holding the interpreter): the peer's
    first message arrives during the stall, its second 0.1 s after."""
    loop = asyncio.get_running_loop()
    ours, peers = socket.socketpair()
    with ours, peers:
        ours.setblocking(False)

        def stall_then_answer() -> None:
            time.sleep(stall)
            peers.send(b"1")
            loop.call_later(0.1, peers.send, b"2")

        async def exchange() -> bytes:
            return await loop.sock_recv(ours, 1) + await loop.sock_recv(ours, 1)

        loop.call_later(0.05, stall_then_answer)
        return await deadline(exchange(), 0.5)


def test_a_stall_of_the_waiting_loop_is_not_counted_against_the_peer():
    assert _run(_answer_after_a_stall(1.0, within)) == b"12"


def test_a_stall_would_have_ended_a_plain_deadline():
    """The case above, under `asyncio.wait_for`: the stall counts, and the wait fails."""

    with pytest.raises(asyncio.TimeoutError):
        _run(_answer_after_a_stall(1.0, asyncio.wait_for))


def test_a_peer_that_never_answers_is_given_up_on_after_the_deadline():
    async def main() -> float:
        never: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        start = time.monotonic()
        with pytest.raises(asyncio.TimeoutError):
            await within(never, 0.3)
        assert never.cancelled()
        return time.monotonic() - start

    assert 0.3 <= _run(main()) < 10


def test_cancelling_the_wait_cancels_what_it_waits_for():
    async def main() -> bool:
        never: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiting = asyncio.ensure_future(within(never, 60))
        await asyncio.sleep(0)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        return never.cancelled()

    assert _run(main())
