"""A message its receiver refuses for its size fails the call it belongs to, at its caller;
the link goes on. (Every proc of a job has the same limit and senders check it first: here a
proc's own limit is lowered after it starts, as a proc misconfigured by hand would have it.)"""

from __future__ import annotations

import importlib.util

import msgspec
import pytest

import danaus
from danaus import Actor, MessageTooLargeError, endpoint, this_host
from danaus.core.actor_mesh import placement_of
from danaus.core.config import current_world
from danaus.core.settings import MiB
from tests.tcp.conftest import wait_until

LOWER = 4 * MiB


def lower_the_limit(limit: int = LOWER) -> None:
    """This proc sends and receives at most ``limit`` bytes a message from now on (set before
    its first)."""
    world = current_world()
    lowered = msgspec.structs.replace(world.options, max_message_bytes=limit)
    world.options = world.transport.limits = lowered  # type: ignore[attr-defined]
    plane = world.transport.data
    for holder in (plane, getattr(plane, "small", None)):
        if holder is not None and hasattr(holder, "limits"):
            holder.limits = lowered
    if hasattr(plane, "_limits"):
        plane._limits = lowered


def raise_the_limit() -> None:
    lower_the_limit(64 * MiB)


class Sink(Actor):
    @endpoint
    def length(self, data: bytes) -> int:
        return len(data)

    @endpoint
    def make(self, count: int) -> bytes:
        return bytes(count)


def large_messages_take_their_plane(sink: Sink, proc: str) -> None:
    """Exchange large messages with ``sink`` on ``proc``; on ucx, until both ways number
    theirs (from then on large ones take UCX's own plane)."""
    data = current_world().transport.data
    assert sink.length.call_one(bytes(MiB)).get(timeout=60) == MiB
    assert len(sink.make.call_one(MiB).get(timeout=60)) == MiB
    if hasattr(data, "ucx"):
        wait_until(lambda: proc in data._sent and proc in data._expected, 30, "numbering")


@pytest.fixture(params=["tcp", "ucx", "verbs"])
def transport(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "ucx":
        if importlib.util.find_spec("ucxx") is None:
            pytest.skip("the ucx transport needs the ucxx package")
        monkeypatch.setenv("DANAUS_UCX_BULK", "ucx")  # large messages over UCX's own plane
    if request.param == "verbs":
        monkeypatch.setenv("DANAUS_VERBS_PROVIDER", "emulated")
    yield request.param
    danaus.shutdown()


def test_a_call_its_receiver_refuses_fails_at_its_caller_and_the_link_goes_on(transport):
    danaus.configure(transport=transport)
    procs = this_host().spawn_procs({"w": 2}, bootstrap=lower_the_limit)
    sinks = procs.spawn("sinks", Sink)
    large_messages_take_their_plane(sinks.slice(w=0), placement_of(procs).members()[0])
    refused = sinks.slice(w=0).length.call_one(bytes(5 * MiB))
    after = sinks.slice(w=0).length.call_one(b"after")
    with pytest.raises(MessageTooLargeError, match=r"refused a message of 52\d{5} bytes") as error:
        refused.get(timeout=60)
    assert placement_of(procs).members()[0] in str(error.value), "it names the proc that refused it"
    assert after.get(timeout=60) == 5
    assert list(sinks.length.call(b"x").get(timeout=60).values()) == [1, 1]
    procs.stop().get(timeout=60)


def test_an_answer_its_callers_proc_refuses_fails_the_call_and_the_link_goes_on(transport):
    danaus.configure(transport=transport, max_message_bytes=LOWER)
    procs = this_host().spawn_procs(bootstrap=raise_the_limit)
    sink = procs.spawn("sink", Sink)
    large_messages_take_their_plane(sink, placement_of(procs).members()[0])
    with pytest.raises(MessageTooLargeError, match=r"proc root refused a message of 52\d{5}"):
        sink.make.call_one(5 * MiB).get(timeout=60)
    assert sink.length.call_one(b"after").get(timeout=60) == 5
