"""GPU memory on verbs, up to the calls only a GPU and a NIC can answer.

There is no GPU here: the CUDA driver is a fake that answers as the driver's
documentation says it does, and the device records what it is asked to
register. What is not run: libcuda itself, ``ibv_reg_dmabuf_mr`` and
``ibv_reg_mr`` on GPU memory, and any transfer to or from a GPU.
"""

from __future__ import annotations

import functools
import mmap
import os
from pathlib import Path
from typing import Any

import pytest

from danaus.core.rdma import as_bytes
from danaus.core.transport import DeviceMemory
from danaus.transports.verbs import gpu
from danaus.transports.verbs.device import (
    REMOTE,
    Access,
    Device,
    DeviceError,
    MemoryRegion,
)
from danaus.transports.verbs.registrations import Registrations

PAGE = mmap.PAGESIZE
BASE = 0x7F00_0000_0000
POINTER = BASE + 0x1100


class FakeDriver:
    """The CUDA driver entry points `register_cuda` calls, answering for one allocation."""

    def __init__(self, *, size: int = 3 * PAGE + 5, export: int = 0) -> None:
        self.size = size
        self.export = export
        self.calls: list[tuple[Any, ...]] = []
        self.fd: int | None = None

    def cuInit(self, flags: int) -> int:
        self.calls.append(("cuInit", flags))
        return 0

    def cuPointerGetAttribute(self, out: Any, attribute: int, pointer: Any) -> int:
        self.calls.append(("cuPointerGetAttribute", attribute, pointer.value))
        out._obj.value = 1
        return 0

    def cuDeviceGet(self, out: Any, ordinal: Any) -> int:
        out._obj.value = ordinal.value
        return 0

    def cuDevicePrimaryCtxRetain(self, out: Any, device: Any) -> int:
        self.calls.append(("cuDevicePrimaryCtxRetain", device.value))
        out._obj.value = 0xC0
        return 0

    def cuCtxSetCurrent(self, context: Any) -> int:
        self.calls.append(("cuCtxSetCurrent", context.value))
        return 0

    def cuPointerSetAttribute(self, value: Any, attribute: int, pointer: Any) -> int:
        self.calls.append(("cuPointerSetAttribute", value._obj.value, attribute, pointer.value))
        return 0

    def cuMemGetAddressRange_v2(self, base: Any, size: Any, pointer: Any) -> int:
        base._obj.value = BASE
        size._obj.value = self.size
        return 0

    def cuMemGetHandleForAddressRange(
        self, out: Any, start: Any, size: Any, kind: int, flags: Any
    ) -> int:
        self.calls.append(("export", start.value, size.value, kind, flags.value))
        if self.export:
            return self.export
        read, write = os.pipe()
        os.close(write)
        self.fd = out._obj.value = read
        return 0


class FakeDevice(Device):
    """Records registrations; refuses dma-buf or peer memory when told to."""

    memory_kinds = frozenset({"cpu", "cuda"})

    def __init__(self, *, dmabuf: bool = True, peer: bool = True) -> None:
        self.dmabuf, self.peer = dmabuf, peer
        self.registered: list[tuple[Any, ...]] = []

    def register(self, address: int, length: int, access: Access, keep: Any) -> MemoryRegion:
        if not self.peer:
            raise DeviceError("registering failed: Bad address")
        self.registered.append(("peer", address, length, access, keep))
        return MemoryRegion(address, length, 1, 2, address, None)

    def register_dmabuf(
        self, fd: int, offset: int, length: int, address: int, access: Access
    ) -> MemoryRegion:
        os.fstat(fd)
        if not self.dmabuf:
            raise DeviceError("registering dma-buf memory failed (not supported)")
        self.registered.append(("dmabuf", fd, offset, length, address, access))
        return MemoryRegion(address, length, 3, 4, offset, None)

    def deregister(self, region: MemoryRegion) -> None:
        self.registered.append(("deregister", region.address))

    def completion_queue(self, depth: int) -> Any:
        raise NotImplementedError

    def queue_pair(self, cq: Any, max_send: int, max_recv: int) -> Any:
        raise NotImplementedError

    def close(self) -> None:
        pass


@pytest.fixture(autouse=True)
def _fresh_contexts(monkeypatch):
    monkeypatch.setattr(gpu, "_contexts", {})


def memory(nbytes: int = 4096) -> DeviceMemory:
    return DeviceMemory(POINTER, nbytes, "cuda", keep="tensor")


def test_cuda_memory_is_registered_through_a_dmabuf_of_its_whole_allocation():
    driver, device = FakeDriver(), FakeDevice()
    region = gpu.register_cuda(device, memory(), REMOTE, driver=driver)
    assert ("cuCtxSetCurrent", 0xC0) in driver.calls
    synchronous = ("cuPointerSetAttribute", 1, gpu.CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, POINTER)
    assert synchronous in driver.calls
    [export] = [call for call in driver.calls if call[0] == "export"]
    assert export == ("export", BASE, 4 * PAGE, gpu.CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0)
    assert device.registered == [("dmabuf", driver.fd, 0x1100, 4096, POINTER, REMOTE)]
    assert region.translate(POINTER + 10) == 0x1100 + 10
    with pytest.raises(OSError):
        os.fstat(driver.fd)


@pytest.mark.parametrize("why", ["the driver cannot export", "the device refuses dma-buf"])
def test_without_dmabuf_the_pointer_is_registered_as_peer_memory(why):
    driver = FakeDriver(export=801 if why == "the driver cannot export" else 0)
    device = FakeDevice(dmabuf=why != "the device refuses dma-buf")
    region = gpu.register_cuda(device, memory(), REMOTE, driver=driver)
    assert device.registered == [("peer", POINTER, 4096, REMOTE, "tensor")]
    assert region.translate(POINTER) == POINTER
    if driver.fd is not None:
        with pytest.raises(OSError):
            os.fstat(driver.fd)


def test_when_neither_way_works_the_error_says_both_and_what_to_check():
    driver, device = FakeDriver(export=801), FakeDevice(peer=False)
    with pytest.raises(DeviceError) as raised:
        gpu.register_cuda(device, memory(), REMOTE, driver=driver)
    message = str(raised.value)
    assert "CUresult 801" in message and "nvidia_peermem" in message
    assert f"{POINTER:#x}" in message


def test_the_registration_cache_registers_gpu_memory_once():
    driver, device = FakeDriver(), FakeDevice()
    registrations = Registrations(device, gpu=functools.partial(gpu.register_cuda, driver=driver))
    first = registrations.pin(memory(), Access.LOCAL_WRITE)
    registrations.release(first)
    second = registrations.pin(memory(1024), Access.LOCAL_WRITE)
    assert registrations.registered == 1
    assert second.iova(16) == 0x1100 + 16
    plain = Registrations(device)
    with pytest.raises(ValueError, match="cannot register cuda memory"):
        plain.pin(memory(), Access.LOCAL_WRITE)


def test_cpu_memory_never_loads_the_cuda_driver():
    registrations = Registrations(FakeDevice(), gpu=gpu.register_cuda)
    registrations.release(registrations.pin(memoryview(bytearray(4096)), REMOTE))
    assert as_bytes(bytearray(8), writable=True, what="x").nbytes == 8
    assert gpu._driver is None
    assert "libcuda" not in Path("/proc/self/maps").read_text()


class FakeCudaArray:
    """A GPU array as torch and CuPy describe one: the CUDA array interface, and a device."""

    def __init__(self, shape, typestr="<f4", strides=None, readonly=False):
        self.device = type("Device", (), {"type": "cuda"})()
        self.__cuda_array_interface__ = {
            "shape": shape,
            "typestr": typestr,
            "strides": strides,
            "data": (POINTER, readonly),
            "version": 3,
        }


def test_gpu_arrays_reach_the_transport_as_device_memory():
    found = as_bytes(FakeCudaArray((4, 8)), writable=True, what="x")
    assert found == DeviceMemory(POINTER, 128, "cuda", found.keep)
    assert found[:100] == DeviceMemory(POINTER, 100, "cuda", found.keep)
    assert found[16:] == DeviceMemory(POINTER + 16, 112, "cuda", found.keep)
    contiguous = as_bytes(FakeCudaArray((4, 8), strides=(32, 4)), writable=True, what="x")
    assert contiguous.nbytes == 128
    with pytest.raises(ValueError, match="x must be contiguous"):
        as_bytes(FakeCudaArray((4, 8), strides=(4, 16)), writable=True, what="x")
    with pytest.raises(ValueError, match="x must be writable"):
        as_bytes(FakeCudaArray((4,), readonly=True), writable=True, what="x")
    assert as_bytes(FakeCudaArray((4,), readonly=True), writable=False, what="x").nbytes == 16
