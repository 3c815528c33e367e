"""GPU memory on ucx, tested up to the UCX call: no GPU is needed, and none is touched.

A CUDA tensor becomes `DeviceMemory` (its address and size; no memoryview, no
copy), which the one-sided layer registers with UCX memory type CUDA and uses
as the local side of a get or a put, also typed CUDA. The native library is
replaced by a recorder here: what these tests cannot show is UCX registering
and moving real device memory (see docs/rdma.md).
"""

from __future__ import annotations

import pytest

pytest.importorskip("ucxx")

from danaus.core.rdma import as_bytes
from danaus.core.transport import DeviceMemory
from danaus.transports.ucx.rma import HOST, OneSidedMemory, UcxMemoryHandle
from danaus.transports.ucx.rma_library import Region

CUDA = 1
"""``UCS_MEMORY_TYPE_CUDA``, as the recorder reports it."""


class Recorder:
    """Stands for `NativeRma`: records what would reach UCX."""

    eventfd = -1
    cuda_type = CUDA

    def __init__(self, memory_types: int) -> None:
        self._memory_types = memory_types
        self.calls: list[tuple[object, ...]] = []

    def memory_types(self) -> int:
        return self._memory_types

    def address(self) -> bytes:
        return b"worker"

    def map(self, address: int, length: int, memory_type: int) -> Region:
        self.calls.append(("map", address, length, memory_type))
        return Region(pointer=1, key=b"key", cell=64, cell_key=b"cell", generation=9)

    def peer(self, address: bytes) -> int:
        return 2

    def submit(self, peer: int, token: int, write: bool, local: int, length: int, *rest: object):
        self.calls.append(("submit", write, local, length, rest[0]))


class Io:
    """Stands for the I/O loop: nothing here needs it to run."""

    def call_soon(self, fn: object, *args: object) -> None:
        pass

    def add_reader(self, source: object, handler: object) -> None:
        pass


def memory(memory_types: int) -> tuple[OneSidedMemory, Recorder]:
    native = Recorder(memory_types)
    return OneSidedMemory("p", Io(), native), native  # type: ignore[arg-type]


def test_cuda_is_offered_only_where_ucx_can_register_it():
    assert memory(1 << HOST)[0].devices == {"cpu"}
    assert memory((1 << HOST) | (1 << CUDA))[0].devices == {"cpu", "cuda"}


def test_device_memory_is_registered_and_moved_as_cuda():
    one_sided, native = memory((1 << HOST) | (1 << CUDA))
    weights = DeviceMemory(0x7F0000000000, 4096, "cuda")
    handle = one_sided.register(weights)
    assert native.calls == [("map", 0x7F0000000000, 4096, CUDA)]
    assert (handle.address, handle.size, handle.backend) == (0x7F0000000000, 4096, "ucx")

    local = DeviceMemory(0x7F1000000000, 8192, "cuda")[:4096]
    one_sided.start(1, handle, 0, local, False, lambda error: None)
    one_sided.start(2, handle, 0, local, True, lambda error: None)
    assert native.calls[1:] == [
        ("submit", False, 0x7F1000000000, 4096, CUDA),
        ("submit", True, 0x7F1000000000, 4096, CUDA),
    ]


def test_host_memory_stays_host():
    one_sided, native = memory(1 << HOST)
    data = bytearray(100)
    handle = one_sided.register(memoryview(data))
    assert isinstance(handle, UcxMemoryHandle)
    assert native.calls[0][2:] == (100, HOST)


def test_a_gpu_tensor_becomes_device_memory_without_touching_the_device():
    torch = pytest.importorskip("torch")
    # A tensor on the "meta" device has a device, a size and no storage: as a CUDA tensor,
    # it cannot be viewed from the CPU, and nothing here may try.
    tensor = torch.empty(3, 5, dtype=torch.float16, device="meta")
    memory = as_bytes(tensor, writable=True, what="a tensor")
    assert isinstance(memory, DeviceMemory)
    assert (memory.nbytes, memory.device, memory.keep is tensor) == (30, "meta", True)
    assert memory[:10].nbytes == 10
    assert (memory[2:10].address, memory[2:10].nbytes) == (memory.address + 2, 8)
    with pytest.raises(ValueError, match="contiguous"):
        memory[::2]
    assert not torch.cuda.is_initialized()
