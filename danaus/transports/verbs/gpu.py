"""GPU memory for the NIC: a CUDA allocation registered through dma-buf, else as peer memory.

Following NVIDIA's GPUDirect RDMA rules, the pointer's memory operations are
made synchronous first (``CU_POINTER_ATTRIBUTE_SYNC_MEMOPS``), so a transfer
never races a copy the GPU still has in flight. Then the whole allocation the
pointer belongs to, in host pages, is exported as a dma-buf
(``cuMemGetHandleForAddressRange``, CUDA 11.7 and later, with a driver and
kernel that support it) and registered with ``ibv_reg_dmabuf_mr``; the
region's work-request addresses are offsets into that dma-buf. Where dma-buf
is not available, the device pointer is registered with ``ibv_reg_mr``,
which works when the ``nvidia_peermem`` kernel module is loaded.

The CUDA driver (``libcuda.so.1``) is loaded the first time GPU memory is
registered, never before: a CPU-only host never loads it. The calls run on
whichever thread registers, so the device's primary context is made current
there first.
"""

from __future__ import annotations

import ctypes
import mmap
import os
from typing import Any

from danaus.core.transport import DeviceMemory
from danaus.transports.verbs.device import Access, Device, DeviceError, MemoryRegion

CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9
CU_POINTER_ATTRIBUTE_SYNC_MEMOPS = 6
CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD = 1

_driver: Any = None
_contexts: dict[int, ctypes.c_void_p] = {}


def cuda_driver() -> Any:
    """The CUDA driver library, loaded now (the first GPU registration)."""
    global _driver
    if _driver is None:
        try:
            _driver = ctypes.CDLL("libcuda.so.1")
        except OSError as exc:
            raise DeviceError(f"GPU memory cannot be registered: no CUDA driver ({exc})") from None
    return _driver


def _check(result: int, call: str) -> None:
    if result != 0:
        raise DeviceError(f"{call} failed (CUresult {result})")


def _make_context_current(cuda: Any, pointer: int) -> None:
    """Make the primary context of the GPU that holds ``pointer`` current on this thread."""
    _check(cuda.cuInit(0), "cuInit")
    ordinal = ctypes.c_int()
    _check(
        cuda.cuPointerGetAttribute(
            ctypes.byref(ordinal), CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, ctypes.c_uint64(pointer)
        ),
        "cuPointerGetAttribute(DEVICE_ORDINAL)",
    )
    context = _contexts.get(ordinal.value)
    if context is None:
        device = ctypes.c_int()
        _check(cuda.cuDeviceGet(ctypes.byref(device), ordinal), "cuDeviceGet")
        context = ctypes.c_void_p()
        _check(
            cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), device), "cuDevicePrimaryCtxRetain"
        )
        _contexts[ordinal.value] = context
    _check(cuda.cuCtxSetCurrent(context), "cuCtxSetCurrent")


def _allocation(cuda: Any, pointer: int) -> tuple[int, int]:
    """The start and size of the allocation holding ``pointer``, widened to host pages."""
    base, size = ctypes.c_uint64(), ctypes.c_size_t()
    _check(
        cuda.cuMemGetAddressRange_v2(
            ctypes.byref(base), ctypes.byref(size), ctypes.c_uint64(pointer)
        ),
        "cuMemGetAddressRange",
    )
    start = base.value - base.value % mmap.PAGESIZE
    end = -(-(base.value + size.value) // mmap.PAGESIZE) * mmap.PAGESIZE
    return start, end - start


def register_cuda(
    device: Device, memory: DeviceMemory, access: Access, driver: Any = None
) -> MemoryRegion:
    """Register ``memory`` (on a CUDA GPU) with ``device``: dma-buf first, peer memory second."""
    cuda = driver if driver is not None else cuda_driver()
    pointer, length = memory.address, memory.nbytes
    _make_context_current(cuda, pointer)
    synchronous = ctypes.c_int(1)
    _check(
        cuda.cuPointerSetAttribute(
            ctypes.byref(synchronous), CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, ctypes.c_uint64(pointer)
        ),
        "cuPointerSetAttribute(SYNC_MEMOPS)",
    )
    start, span = _allocation(cuda, pointer)
    fd = ctypes.c_int(-1)
    exported = cuda.cuMemGetHandleForAddressRange(
        ctypes.byref(fd),
        ctypes.c_uint64(start),
        ctypes.c_size_t(span),
        CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD,
        ctypes.c_ulonglong(0),
    )
    if exported == 0:
        try:
            return device.register_dmabuf(fd.value, pointer - start, length, pointer, access)
        except DeviceError as exc:
            why = str(exc)
        finally:
            os.close(fd.value)
    else:
        why = f"cuMemGetHandleForAddressRange failed (CUresult {exported})"
    try:
        return device.register(pointer, length, access, memory.keep)
    except DeviceError as exc:
        raise DeviceError(
            f"GPU memory of {length} bytes at {pointer:#x} could not be registered: not through "
            f"dma-buf ({why}), nor as peer memory ({exc}; is the nvidia_peermem module loaded?)"
        ) from None
