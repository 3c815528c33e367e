"""The pyverbs device: choosing a device and port, and what it asks of pyverbs.

This host has no RDMA device (its kernel has no RDMA support), so: the "no
device" path runs for real where pyverbs imports (Debian's python3-pyverbs,
which ``make install`` links into the virtual environment); device and port
choice runs against a stand-in pyverbs; and the queue-pair calls are checked
with pyverbs's own attribute and work-request objects, handed to a queue pair
that records them instead of calling the device. Not run: opening a device,
a protection domain, memory regions, completion queues or queue pairs, and
any traffic.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import danaus
from danaus.core.settings import Settings
from danaus.transports.verbs import hardware
from danaus.transports.verbs.device import (
    REMOTE,
    Endpoint,
    NoDeviceError,
    PortInfo,
    Timeouts,
    WcOpcode,
    WcStatus,
    WrOpcode,
)

ROOT = Path(__file__).resolve().parents[2]
HAS_PYVERBS = importlib.util.find_spec("pyverbs") is not None
needs_pyverbs = pytest.mark.skipif(
    not HAS_PYVERBS, reason="pyverbs is not installed (make install links python3-pyverbs)"
)


@pytest.fixture(autouse=True)
def _hardware_provider(monkeypatch):
    for name in ("DANAUS_VERBS_PROVIDER", "DANAUS_VERBS_DEVICE", "DANAUS_VERBS_PORT"):
        monkeypatch.delenv(name, raising=False)


def one_sentence(text: str) -> bool:
    return "\n" not in text and text.count(". ") == 0 and not text.endswith(".")


@needs_pyverbs
def test_configure_on_a_host_without_rdma_says_so_in_one_sentence():
    with pytest.raises(NoDeviceError) as raised:
        danaus.configure(transport="verbs")
    message = str(raised.value)
    assert message.startswith("no RDMA device found on this host")
    assert "transport='tcp' or 'ucx'" in message and "DANAUS_VERBS_PROVIDER=emulated" in message
    assert one_sentence(message)
    error = raised.value
    assert error.__cause__ is None and (error.__suppress_context__ or error.__context__ is None)


@needs_pyverbs
def test_the_environment_variable_fails_the_same_way_without_a_pyverbs_traceback():
    env = {k: v for k, v in os.environ.items() if not k.startswith("DANAUS_VERBS")}
    done = subprocess.run(
        [sys.executable, "-c", "import danaus; danaus.this_host()"],
        cwd=ROOT,
        env={**env, "DANAUS_TRANSPORT": "verbs"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("danaus.transports.verbs.device.NoDeviceError: no RDMA device found")
    assert "/pyverbs/" not in done.stderr and "PyverbsRDMAError" not in done.stderr


def test_configure_without_pyverbs_names_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "pyverbs", None)
    with pytest.raises(ImportError) as raised:
        danaus.configure(transport="verbs")
    message = str(raised.value)
    assert message.startswith("the verbs transport needs pyverbs")
    assert "install python3-pyverbs" in message and "transport='tcp' or 'ucx'" in message
    assert one_sentence(message)


@dataclass
class _Port:
    state: int


class _Context:
    """A device context with ``ports`` (port number: state)."""

    opened: list[str] = []

    def __init__(self, name: str) -> None:
        self.name = name
        self.ports = FAKE_PORTS[name]
        _Context.opened.append(name)

    def query_device(self) -> Any:
        return types.SimpleNamespace(phys_port_cnt=len(self.ports))

    def query_port(self, port: int) -> _Port:
        return _Port(self.ports[port])

    def close(self) -> None:
        pass


ACTIVE, DOWN = 4, 1
FAKE_PORTS: dict[str, dict[int, int]] = {}


@pytest.fixture
def fake_pyverbs(monkeypatch):
    """A pyverbs whose device list and contexts are ``FAKE_PORTS``."""
    package = types.ModuleType("pyverbs")
    error = types.ModuleType("pyverbs.pyverbs_error")
    error.PyverbsError = type("PyverbsError", (Exception,), {})
    device = types.ModuleType("pyverbs.device")
    device.get_device_list = lambda: [types.SimpleNamespace(name=n.encode()) for n in FAKE_PORTS]
    device.Context = lambda name: _Context(name)
    enums = types.ModuleType("pyverbs.enums")
    enums.IBV_PORT_ACTIVE = ACTIVE
    package.device, package.enums, package.pyverbs_error = device, enums, error
    for name, module in [
        ("pyverbs", package),
        ("pyverbs.device", device),
        ("pyverbs.enums", enums),
        ("pyverbs.pyverbs_error", error),
    ]:
        monkeypatch.setitem(sys.modules, name, module)
    FAKE_PORTS.clear()
    _Context.opened.clear()
    return FAKE_PORTS


def test_the_first_active_port_of_the_first_device_that_has_one_is_chosen(fake_pyverbs):
    fake_pyverbs.update({"mlx5_0": {1: DOWN}, "mlx5_1": {1: DOWN, 2: ACTIVE}})
    _, name, port, _ = hardware._open_port(Settings())
    assert (name, port) == ("mlx5_1", 2)
    fake_pyverbs.update({"mlx5_0": {1: DOWN, 2: ACTIVE}})
    assert hardware._open_port(Settings(verbs_port=2))[1:3] == ("mlx5_0", 2)


def test_a_device_that_is_not_there_is_named_with_those_that_are(fake_pyverbs):
    fake_pyverbs.update({"mlx5_0": {1: ACTIVE}, "mlx5_1": {1: ACTIVE}})
    with pytest.raises(NoDeviceError) as raised:
        hardware.check(Settings(verbs_device="mlx5_7"))
    message = str(raised.value)
    assert message == (
        "no RDMA device named 'mlx5_7' on this host (it has mlx5_0, mlx5_1): "
        "set DANAUS_VERBS_DEVICE to one of them"
    )


def test_a_device_without_an_active_port_is_refused(fake_pyverbs):
    fake_pyverbs.update({"mlx5_0": {1: DOWN}})
    with pytest.raises(NoDeviceError, match="no active RDMA port on mlx5_0 port 1") as raised:
        hardware.check(Settings(verbs_device="mlx5_0", verbs_port=1))
    assert one_sentence(str(raised.value))
    fake_pyverbs.clear()
    with pytest.raises(NoDeviceError, match="no RDMA device found on this host"):
        hardware.check(Settings())


class _RecordingQP:
    """A queue pair that keeps what it is asked to do instead of asking a device."""

    qp_num = 77

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []

    def __getattr__(self, name: str) -> Any:
        return lambda *args: self.calls.append((name, args))


def _queue_pair() -> tuple[hardware.HardwareQueuePair, _RecordingQP]:
    device = object.__new__(hardware.HardwareDevice)
    device.port = PortInfo("mlx5_0", 1, 3, 9, bytes(16), 5, 1 << 30, "ethernet")
    device.reads_served, device.reads_issued = 16, 8
    recorder = _RecordingQP()
    return hardware.HardwareQueuePair(device, recorder), recorder


@needs_pyverbs
def test_queue_pair_transitions_carry_the_attributes_the_specification_asks_for():
    import pyverbs.enums as e

    qp, recorder = _queue_pair()
    gid = bytes.fromhex("fe80000000000000020000fffe000001")
    timeouts = Timeouts(timeout=14, retry_count=6, rnr_retry=7, min_rnr_timer=12)
    qp.to_init(REMOTE)
    qp.to_rtr(Endpoint(lid=5, gid=gid, qpn=1234, psn=99, mtu=3), timeouts)
    qp.to_rts(4321, timeouts)
    qp.to_error()
    [(step, (init,)), (_, (rtr,)), (_, (rts,)), (modify, (error, mask))] = recorder.calls
    assert step == "to_init" and modify == "modify"
    assert (init.port_num, init.pkey_index, init.qp_access_flags) == (1, 0, int(REMOTE))
    assert (rtr.path_mtu, rtr.dest_qp_num, rtr.rq_psn) == (3, 1234, 99)
    assert (rtr.max_dest_rd_atomic, rtr.min_rnr_timer) == (16, 12)
    route = rtr.ah_attr
    assert (route.dlid, route.is_global, route.port_num) == (5, 1, 1)
    assert (route.sgid_index, route.hop_limit) == (3, 255)
    assert str(route.dgid) == "fe80:0000:0000:0000:0200:00ff:fe00:0001"
    assert (rts.sq_psn, rts.timeout, rts.retry_cnt, rts.rnr_retry) == (4321, 14, 6, 7)
    assert rts.max_rd_atomic == 8
    assert (error.qp_state, mask) == (e.IBV_QPS_ERR, e.IBV_QP_STATE)


@needs_pyverbs
def test_work_requests_are_signaled_single_element_and_rdma_ones_carry_the_remote_address(
    monkeypatch,
):
    import pyverbs.enums as e
    import pyverbs.wr

    remote: list[tuple[int, int]] = []

    class SendWR(pyverbs.wr.SendWR):
        def set_wr_rdma(self, rkey: int, address: int) -> None:
            remote.append((rkey, address))
            super().set_wr_rdma(rkey, address)

    monkeypatch.setattr(pyverbs.wr, "SendWR", SendWR)
    qp, recorder = _queue_pair()
    qp.post_send(7, WrOpcode.RDMA_READ, 0x1000, 64, 11, 0x9000, 22)
    qp.post_send(8, WrOpcode.SEND, 0x2000, 32, 11)
    qp.post_recv(9, 0x3000, 16, 11)
    [(_, (read,)), (_, (send,)), (_, (receive,))] = recorder.calls
    assert (read.wr_id, read.opcode, read.num_sge, read.send_flags) == (
        7,
        e.IBV_WR_RDMA_READ,
        1,
        e.IBV_SEND_SIGNALED,
    )
    assert remote == [(22, 0x9000)]
    assert (send.wr_id, send.opcode) == (8, e.IBV_WR_SEND)
    assert (receive.wr_id, receive.num_sge) == (9, 1)


def test_polled_completions_keep_their_status_and_an_undefined_opcode_reads_as_send():
    queue = object.__new__(hardware.HardwareCompletionQueue)
    found = [
        types.SimpleNamespace(wr_id=1, status=0, opcode=2, byte_len=64, qp_num=5),
        types.SimpleNamespace(wr_id=2, status=12, opcode=0xDEAD, byte_len=0, qp_num=5),
    ]
    queue.cq = types.SimpleNamespace(poll=lambda count: (len(found), found))
    queue._channel = types.SimpleNamespace()
    read, failed = queue.poll(16)
    assert (read.status, read.opcode, read.byte_len) == (WcStatus.SUCCESS, WcOpcode.RDMA_READ, 64)
    assert (failed.status, failed.opcode) == (WcStatus.RETRY_EXC_ERR, WcOpcode.SEND)
    assert queue.fileno() is None
