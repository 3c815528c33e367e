"""On ucx, only members of the job get a message through; the rest are refused at the door.

A UCX connection starts with a challenge answered with an HMAC under the job's
secret. An intruder with another secret is refused before any of its frames is
read; a member that proves itself and then sends garbage reaches the decoder,
which rejects the garbage. Either way the proc keeps serving.
"""

from __future__ import annotations

import logging

import pytest

pytest.importorskip("ucxx")

import danaus
from danaus import Actor, context, endpoint, this_host
from danaus.core import config
from danaus.core.settings import Limits
from danaus.transports.tcp.control import DATA
from danaus.transports.tcp.refusals import RefusalLog
from danaus.transports.ucx.plane import UcxPlane
from tests.tcp.conftest import wait_until


class Echo(Actor):
    """Echoes, and keeps the log records of its process's transport."""

    def __init__(self) -> None:
        self.records: list[str] = []
        handler = logging.Handler()
        handler.emit = lambda record: self.records.append(record.getMessage())
        logging.getLogger("danaus").addHandler(handler)

    @endpoint
    def echo(self, value: int) -> int:
        return value

    @endpoint
    def logged(self) -> list[str]:
        return list(self.records)

    @endpoint
    def ucx_address(self) -> tuple[str, str]:
        transport = context().actor_instance.runtime.transport
        return transport.proc_id, transport.data.ucx().listening().result(30)


@pytest.fixture
def echo():
    danaus.configure(transport="ucx")
    try:
        mesh = this_host().spawn_procs().spawn("echo", Echo)
        yield mesh, *mesh.ucx_address.call_one().get(timeout=60)
    finally:
        danaus.shutdown()


def knock(proc: str, address: str, secret: bytes) -> UcxPlane:
    """Connect to ``proc`` at ``address`` as a proc holding ``secret``, and send it garbage."""
    plane = UcxPlane(
        "visitor",
        secret,
        "127.0.0.1",
        Limits(),
        RefusalLog(lambda delay, flush: None),  # these tests count no refusals
        lambda src, frames: None,
        lambda src, frames, reason: None,
        lambda peer, reason: None,
    )
    plane.resolved(proc, address)
    plane.send(proc, [DATA, b"not a header", b"payload"])
    return plane


def test_wrong_secret_is_refused_and_a_member_reaches_the_decoder(echo):
    mesh, proc, address = echo

    def logged(text: str) -> bool:
        return any(text in line for line in mesh.logged.call_one().get(timeout=30))

    intruder = knock(proc, address, b"another job's secret")
    try:
        wait_until(lambda: logged("refused a connection"), 30, "the intruder refused")
        assert not logged("rejected a message")
        assert mesh.echo.call_one(5).get(timeout=30) == 5
    finally:
        intruder.stop()

    member = knock(proc, address, config.installed().keys.secret)
    try:
        wait_until(lambda: logged("rejected a message"), 30, "the member's garbage rejected")
        assert mesh.echo.call_one(6).get(timeout=30) == 6
    finally:
        member.stop()
