"""The emulated RC device behaves as the verbs specification says a device does."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from danaus.transports.verbs.device import (
    REMOTE,
    Access,
    DeviceError,
    Endpoint,
    QpState,
    WcOpcode,
    WcStatus,
    WrOpcode,
)
from danaus.transports.verbs.emulated import EmulatedDevice
from tests.verbs.devices import FAST, Side, connect, side, wait_for, wait_until

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def devices() -> Iterator[tuple[EmulatedDevice, EmulatedDevice]]:
    a, b = EmulatedDevice("a"), EmulatedDevice("b")
    try:
        yield a, b
    finally:
        a.close()
        b.close()


@pytest.fixture
def pair(devices) -> tuple[Side, Side]:
    a, b = side(devices[0]), side(devices[1], psn=7000)
    connect(a, b)
    return a, b


def test_a_queue_pair_moves_through_its_states_in_order(devices):
    a, b = side(devices[0]), side(devices[1])
    assert a.qp.state is QpState.RESET
    with pytest.raises(DeviceError, match="RESET to RTR"):
        a.qp.to_rtr(b.endpoint(), FAST)
    with pytest.raises(DeviceError, match="in RESET"):
        a.qp.post_recv(1, a.address, 16, a.region.lkey)
    a.qp.to_init(REMOTE)
    with pytest.raises(DeviceError, match="in INIT"):
        a.qp.post_send(1, WrOpcode.SEND, a.address, 16, a.region.lkey)
    with pytest.raises(DeviceError, match="INIT to RTS"):
        a.qp.to_rts(1, FAST)
    a.qp.to_rtr(b.endpoint(), FAST)
    assert a.qp.state is QpState.RTR
    a.qp.post_recv(1, a.address, 16, a.region.lkey)
    with pytest.raises(DeviceError, match="in RTR"):
        a.qp.post_send(2, WrOpcode.SEND, a.address, 16, a.region.lkey)
    a.qp.to_rts(1, FAST)
    assert a.qp.state is QpState.RTS
    a.qp.to_error()
    assert a.qp.state is QpState.ERR
    [flushed] = wait_for(a.cq)
    assert (flushed.wr_id, flushed.status, flushed.opcode) == (1, WcStatus.WR_FLUSH_ERR, 128)
    a.qp.post_send(3, WrOpcode.SEND, a.address, 16, a.region.lkey)
    [late] = wait_for(a.cq)
    assert (late.wr_id, late.status) == (3, WcStatus.WR_FLUSH_ERR)


def test_sends_land_in_posted_receives_in_order(pair):
    a, b = pair
    for i in range(3):
        b.qp.post_recv(10 + i, b.address + 100 * i, 100, b.region.lkey)
    for i, text in enumerate([b"one", b"two!", b"three"]):
        a.memory[1000 * i : 1000 * i + len(text)] = text
        a.qp.post_send(i, WrOpcode.SEND, a.address + 1000 * i, len(text), a.region.lkey)
    sent = wait_for(a.cq, 3)
    received = wait_for(b.cq, 3)
    assert [(c.wr_id, c.status, c.opcode) for c in sent] == [
        (i, WcStatus.SUCCESS, WcOpcode.SEND) for i in range(3)
    ]
    assert [(c.wr_id, c.byte_len, c.qp_num) for c in received] == [
        (10, 3, b.qp.number),
        (11, 4, b.qp.number),
        (12, 5, b.qp.number),
    ]
    assert bytes(b.memory[0:3]) + bytes(b.memory[100:104]) + bytes(b.memory[200:205]) == (
        b"onetwo!three"
    )


def test_rdma_write_and_read_touch_only_the_remote_memory(pair):
    a, b = pair
    a.memory[:5] = b"hello"
    remote = (b.address + 50, b.region.rkey)
    a.qp.post_send(1, WrOpcode.RDMA_WRITE, a.address, 5, a.region.lkey, *remote)
    a.qp.post_send(2, WrOpcode.RDMA_READ, a.address + 10, 5, a.region.lkey, *remote)
    done = wait_for(a.cq, 2)
    assert [(c.wr_id, c.status, c.opcode) for c in done] == [
        (1, WcStatus.SUCCESS, WcOpcode.RDMA_WRITE),
        (2, WcStatus.SUCCESS, WcOpcode.RDMA_READ),
    ]
    assert bytes(b.memory[50:55]) == b"hello"
    assert bytes(a.memory[10:15]) == b"hello"
    assert b.cq.poll(10) == []


def test_a_send_without_a_posted_receive_waits_for_one(pair):
    a, b = pair
    a.memory[:4] = b"late"
    a.qp.post_send(1, WrOpcode.SEND, a.address, 4, a.region.lkey)
    wait_until(lambda: b.device.counters.rnr_naks_sent >= 2, what="receiver-not-ready answers")
    assert a.cq.poll(1) == []
    b.qp.post_recv(9, b.address, 64, b.region.lkey)
    assert wait_for(a.cq)[0].status is WcStatus.SUCCESS
    assert wait_for(b.cq)[0].byte_len == 4
    assert bytes(b.memory[:4]) == b"late"


def test_receiver_not_ready_fails_the_send_once_rnr_retry_is_spent(devices):
    a, b = side(devices[0]), side(devices[1])
    connect(a, b, dataclasses.replace(FAST, rnr_retry=1))
    a.qp.post_send(1, WrOpcode.SEND, a.address, 4, a.region.lkey)
    a.qp.post_send(2, WrOpcode.SEND, a.address, 4, a.region.lkey)
    first, second = wait_for(a.cq, 2)
    assert (first.wr_id, first.status) == (1, WcStatus.RNR_RETRY_EXC_ERR)
    assert (second.wr_id, second.status) == (2, WcStatus.WR_FLUSH_ERR)
    assert a.qp.state is QpState.ERR
    # The first try and its one RNR retry were both refused; on a busy machine the
    # sender's ack timer may also fire and send once more, which is refused too.
    assert b.device.counters.rnr_naks_sent >= 2


@pytest.mark.parametrize(
    "what", ["unknown key", "past the end", "write to read-only", "deregistered"]
)
def test_a_remote_access_error_fails_the_request_and_both_queue_pairs(devices, what):
    a = side(devices[0])
    b = side(devices[1], access=Access.LOCAL_WRITE | Access.REMOTE_READ)
    connect(a, b)
    b.qp.post_recv(7, b.address, 64, b.region.lkey)
    opcode, address, rkey = WrOpcode.RDMA_READ, b.address, b.region.rkey
    if what == "unknown key":
        rkey ^= 1
    elif what == "past the end":
        address += len(b.memory) - 2
    elif what == "write to read-only":
        opcode = WrOpcode.RDMA_WRITE
    else:
        b.device.deregister(b.region)
    a.qp.post_send(1, opcode, a.address, 4, a.region.lkey, address, rkey)
    a.qp.post_send(2, WrOpcode.RDMA_READ, a.address, 4, a.region.lkey, b.address, b.region.rkey)
    failed, flushed = wait_for(a.cq, 2)
    assert (failed.wr_id, failed.status) == (1, WcStatus.REM_ACCESS_ERR)
    assert (flushed.wr_id, flushed.status) == (2, WcStatus.WR_FLUSH_ERR)
    assert a.qp.state is QpState.ERR and b.qp.state is QpState.ERR
    [receive] = wait_for(b.cq)
    assert (receive.wr_id, receive.status) == (7, WcStatus.WR_FLUSH_ERR)
    assert b.device.counters.access_naks_sent == 1


def test_a_send_larger_than_the_receive_is_an_invalid_request(pair):
    a, b = pair
    b.qp.post_recv(7, b.address, 8, b.region.lkey)
    a.qp.post_send(1, WrOpcode.SEND, a.address, 9, a.region.lkey)
    [sent] = wait_for(a.cq)
    [received] = wait_for(b.cq)
    assert sent.status is WcStatus.REM_INV_REQ_ERR
    assert received.status is WcStatus.LOC_LEN_ERR
    assert a.qp.state is QpState.ERR and b.qp.state is QpState.ERR


def test_a_responder_in_error_stops_answering_and_the_requester_gives_up(pair):
    a, b = pair
    b.qp.to_error()
    a.qp.post_send(1, WrOpcode.SEND, a.address, 4, a.region.lkey)
    [sent] = wait_for(a.cq)
    assert sent.status is WcStatus.RETRY_EXC_ERR
    assert a.device.counters.retransmissions == FAST.retry_count


def test_a_closed_peer_device_makes_requests_exceed_their_retries(pair):
    a, b = pair
    b.device.close()
    a.qp.post_send(1, WrOpcode.RDMA_READ, a.address, 4, a.region.lkey, b.address, b.region.rkey)
    [read] = wait_for(a.cq)
    assert read.status is WcStatus.RETRY_EXC_ERR
    assert a.qp.state is QpState.ERR


def test_large_transfers_both_ways_at_once(pair):
    size = 8 << 20
    a, b = side(pair[0].device, size), side(pair[1].device, size, psn=9)
    connect(a, b)
    a.memory[:] = os.urandom(size)
    b.memory[:] = os.urandom(size)
    expected_a, expected_b = bytes(b.memory), bytes(a.memory)
    half = size // 2
    a.qp.post_send(1, WrOpcode.RDMA_READ, a.address, half, a.region.lkey, b.address, b.region.rkey)
    b.qp.post_send(1, WrOpcode.RDMA_READ, b.address, half, b.region.lkey, a.address, a.region.rkey)
    assert wait_for(a.cq)[0].status is WcStatus.SUCCESS
    assert wait_for(b.cq)[0].status is WcStatus.SUCCESS
    assert bytes(a.memory[:half]) == expected_a[:half]
    assert bytes(b.memory[:half]) == expected_b[:half]


PEER = textwrap.dedent(
    """
    import ctypes, sys
    from danaus.transports.verbs.device import REMOTE, Endpoint, Timeouts
    from danaus.transports.verbs.emulated import EmulatedDevice
    from tests.verbs.devices import FAST, side, wait_for

    device = EmulatedDevice("child")
    me = side(device, psn=55)
    print(me.endpoint().gid.hex(), me.qp.number, me.endpoint().lid, flush=True)
    gid, qpn, lid = sys.stdin.readline().split()
    me.qp.to_init(REMOTE)
    me.qp.to_rtr(Endpoint(int(lid), bytes.fromhex(gid), int(qpn), 1, 5), FAST)
    me.qp.to_rts(55, FAST)
    me.qp.post_recv(1, me.address, 64, me.region.lkey)
    [received] = wait_for(me.cq, timeout=30)
    print(bytes(me.memory[: received.byte_len]).decode(), flush=True)
    sys.stdin.readline()
    """
)


def test_devices_in_two_processes_and_the_death_of_one(devices):
    child = subprocess.Popen(
        [sys.executable, "-c", PEER],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdin is not None and child.stdout is not None
        gid, qpn, lid = child.stdout.readline().split()
        me = side(devices[0], psn=1)
        me.qp.to_init(REMOTE)
        me.qp.to_rtr(Endpoint(int(lid), bytes.fromhex(gid), int(qpn), 55, 5), FAST)
        me.qp.to_rts(1, FAST)
        child.stdin.write(f"{me.endpoint().gid.hex()} {me.qp.number} {me.endpoint().lid}\n")
        child.stdin.flush()
        me.memory[:5] = b"hello"
        me.qp.post_send(1, WrOpcode.SEND, me.address, 5, me.region.lkey)
        assert wait_for(me.cq)[0].status is WcStatus.SUCCESS
        assert child.stdout.readline().strip() == "hello"
        child.kill()
        child.wait(30)
        me.qp.post_send(2, WrOpcode.SEND, me.address, 5, me.region.lkey)
        [lost] = wait_for(me.cq)
        assert lost.status is WcStatus.RETRY_EXC_ERR
    finally:
        child.kill()
        child.wait(30)
