"""One-sided RDMA on ucx: transfers run while the owner's Python cannot, and fail clearly.

The owner's whole Python is frozen (one C call holds the GIL) while another
proc reads and writes 64 MiB of its memory. Over UCX's TCP emulation a paused
owner makes a transfer time out, and nothing of it lands afterwards. Errors
name the buffer. With one-sided transfers turned off, the served fallback takes
over and its warning says why.
"""

from __future__ import annotations

import ctypes
import dataclasses
import os
import select
import subprocess
import sys
import warnings
import zlib

import numpy as np
import pytest

pytest.importorskip("ucxx")

import danaus
from danaus import Actor, endpoint, this_host
from danaus.chaos import pause, resume
from danaus.rdma import RDMABuffer, RDMAFallbackWarning, backend
from tests.tcp.conftest import process_state, wait_until

MiB = 1 << 20


def checksum(data: object) -> int:
    return zlib.crc32(memoryview(np.ascontiguousarray(data)).cast("B"))


class Owner(Actor):
    def __init__(self) -> None:
        self.memory = np.zeros(0, dtype=np.uint8)
        self.buffer: RDMABuffer | None = None

    @endpoint
    def share(self, size: int) -> tuple[RDMABuffer, int]:
        self.memory = np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8)
        self.buffer = RDMABuffer(self.memory)
        return self.buffer, checksum(self.memory)

    @endpoint
    def checksum(self) -> int:
        return checksum(self.memory)

    @endpoint
    def pid(self) -> int:
        return os.getpid()

    @endpoint
    def freeze(self, held: str, release: str) -> str:
        """Say so on ``held``, then keep the GIL in one C call until ``release`` has a byte.

        ctypes.PyDLL does not release the GIL around its calls: while ``read`` blocks,
        no Python code runs in this process, on any thread.
        """
        held_fd = os.open(held, os.O_RDWR)
        release_fd = os.open(release, os.O_RDWR)
        try:
            byte = ctypes.create_string_buffer(1)
            os.write(held_fd, b"h")
            ctypes.PyDLL(None).read(release_fd, byte, 1)
            return byte.raw.decode()
        finally:
            os.close(held_fd)
            os.close(release_fd)

    @endpoint
    def cuda_initialized(self) -> bool:
        import torch

        return torch.cuda.is_initialized()


class Registrar(Actor):
    @endpoint
    def register(self) -> tuple[bool, str, list[str]]:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            self.buffer = RDMABuffer(np.zeros(8, dtype=np.uint8))
        info = backend()
        warned = [str(w.message) for w in caught if w.category is RDMAFallbackWarning]
        return info.one_sided, info.describe(), warned


@pytest.fixture
def ucx():
    """A ucx world whose heartbeats tolerate an owner frozen for a while."""
    danaus.configure(transport="ucx", heartbeat_interval=0.5, heartbeat_timeout=60)
    try:
        yield
    finally:
        danaus.shutdown()


def owner() -> Owner:
    return this_host().spawn_procs().spawn("owner", Owner)


def wait_readable(fd: int, timeout: float, what: str) -> None:
    ready, _, _ = select.select([fd], [], [], timeout)
    if not ready:
        pytest.fail(f"timed out after {timeout} s waiting for {what}")


def test_64_mib_moves_while_the_owner_cannot_run_python(ucx, tmp_path):
    mesh = owner()
    buffer, expected = mesh.share.call_one(64 * MiB).get(timeout=60)
    held, release = tmp_path / "held", tmp_path / "release"
    os.mkfifo(held)
    os.mkfifo(release)
    held_fd = os.open(held, os.O_RDONLY | os.O_NONBLOCK)
    release_fd = os.open(release, os.O_RDWR)
    try:
        frozen = mesh.freeze.call_one(str(held), str(release))
        wait_readable(held_fd, 60, "the owner to freeze")
        pulled = np.empty(64 * MiB, dtype=np.uint8)
        buffer.read_into(pulled, timeout=20).get(timeout=60)
        pushed = np.full(64 * MiB, 7, dtype=np.uint8)
        buffer.write_from(pushed, timeout=20).get(timeout=60)
        still_frozen = not frozen.done()
    finally:
        os.write(release_fd, b"r")
        os.close(release_fd)
        os.close(held_fd)
    assert frozen.get(timeout=60) == "r"
    assert still_frozen
    assert checksum(pulled) == expected
    assert mesh.checksum.call_one().get(timeout=60) == checksum(pushed)
    assert mesh.cuda_initialized.call_one().get(timeout=60) is False


def test_a_paused_owner_over_tcp_times_out_and_nothing_lands_after(ucx, monkeypatch):
    monkeypatch.setenv("UCX_TLS", "tcp")  # the owner's UCX: transfers are emulated in its progress
    mesh = owner()
    pid = mesh.pid.call_one().get(timeout=60)
    buffer, expected = mesh.share.call_one(4 * MiB).get(timeout=60)
    warm = np.empty(4 * MiB, dtype=np.uint8)
    buffer.read_into(warm).get(timeout=60)
    late = np.zeros(4 * MiB, dtype=np.uint8)
    pause(mesh)  # the signal goes out from the controller's I/O thread, a moment later
    try:
        wait_until(lambda: process_state(pid) == "T", 10, "the owner to stop")
        with pytest.raises(TimeoutError, match=r"within 0\.5 s"):
            buffer.read_into(late, timeout=0.5).get(timeout=60)
    finally:
        resume(mesh)
    fresh = np.empty(4 * MiB, dtype=np.uint8)
    buffer.read_into(fresh).get(timeout=60)
    assert checksum(warm) == checksum(fresh) == expected
    assert not late.any()


def test_errors_name_the_buffer(ucx):
    mesh = owner()
    buffer, _ = mesh.share.call_one(4096).get(timeout=60)
    handle = buffer._handle
    name = f"RDMA buffer {handle.key} of {handle.owner} (4096 bytes)"
    out = np.empty(4096, dtype=np.uint8)

    def forged(**fields: object) -> RDMABuffer:
        return RDMABuffer._from_handle(dataclasses.replace(handle, **fields))

    bad_key = forged(rkey=b"\xff" * len(handle.rkey)).read_into(out).exception(timeout=60)
    assert isinstance(bad_key, RuntimeError)
    assert str(bad_key) == f"{name}: its remote key does not unpack here"
    stale = forged(generation=handle.generation ^ 1).write_from(out).exception(timeout=60)
    assert str(stale) == f"{name}: the RDMA buffer was dropped by its owner"


def test_out_of_range_transfers_fail_naming_the_buffer(ucx):
    class Prober(Actor):
        @endpoint
        def read_past_the_end(self, buffer: RDMABuffer) -> str:
            runtime = danaus.context().actor_instance.runtime
            reading = runtime.transport.read(buffer._handle, 4000, memoryview(bytearray(200)))
            return str(runtime.submit(reading).exception(timeout=60))

    mesh = owner()
    buffer, _ = mesh.share.call_one(4096).get(timeout=60)
    prober = this_host().spawn_procs().spawn("prober", Prober)
    message = prober.read_past_the_end.call_one(buffer).get(timeout=60)
    handle = buffer._handle
    name = f"RDMA buffer {handle.key} of {handle.owner} (4096 bytes)"
    assert message == f"{name}: bytes 4000..4200 are out of range"


def test_turned_off_it_falls_back_to_served_transfers_and_says_why(monkeypatch):
    monkeypatch.setenv("DANAUS_UCX_RMA", "off")
    danaus.configure(transport="ucx")
    try:
        registrar = this_host().spawn_procs().spawn("registrar", Registrar)
        one_sided, description, warned = registrar.register.call_one().get(timeout=60)
        mesh = owner()
        buffer, expected = mesh.share.call_one(MiB).get(timeout=60)
        out = np.empty(MiB, dtype=np.uint8)
        buffer.read_into(out).get(timeout=60)
    finally:
        danaus.shutdown()
    assert one_sided is False
    assert "one-sided transfers are turned off (DANAUS_UCX_RMA=off)" in description
    assert warned == [description]
    assert checksum(out) == expected


def test_the_library_builds_once_and_says_why_it_cannot(tmp_path, monkeypatch):
    from danaus.transports.ucx import rma, rma_build

    monkeypatch.setenv("DANAUS_CACHE_DIR", str(tmp_path / "cache"))
    built = rma_build.library()
    assert built.is_file() and built.parent.parent == tmp_path / "cache"
    assert rma_build.library() == built

    broken = tmp_path / "broken.cpp"
    broken.write_text("this is not C++\n")
    with monkeypatch.context() as patched:
        patched.setattr(rma_build, "SOURCE", broken)
        with pytest.raises(rma_build.RmaUnavailable, match=r"compiling broken\.cpp with .* failed"):
            rma_build.library()

    monkeypatch.setenv("CXX", str(tmp_path / "no-such-compiler"))
    with pytest.raises(rma_build.RmaUnavailable, match=r"no C\+\+ compiler"):
        rma_build.library()
    one_sided, reason = rma.available("p", io=None, bind_host="127.0.0.1")  # type: ignore[arg-type]
    assert one_sided is None
    assert reason.startswith("one-sided transfers are unavailable: no C++ compiler")


def test_a_job_on_loopback_keeps_its_rma_worker_on_loopback(monkeypatch):
    from danaus.transports.ucx.rma import network_devices

    monkeypatch.delenv("UCX_NET_DEVICES", raising=False)
    assert network_devices("127.0.0.1") == network_devices("::1") == "lo"
    assert network_devices("0.0.0.0") == network_devices("10.0.0.5") == ""
    monkeypatch.setenv("UCX_NET_DEVICES", "mlx5_0:1")
    assert network_devices("127.0.0.1") == ""


def test_a_proc_that_makes_no_transfer_never_imports_numpy():
    """numpy's import costs every ucx process some 85 ms and a thread; only transfers need it."""
    check = "import sys, danaus.transports.ucx; print('numpy' in sys.modules)"
    result = subprocess.run(
        [sys.executable, "-c", check], capture_output=True, text=True, check=True, timeout=120
    )
    assert result.stdout.strip() == "False"
