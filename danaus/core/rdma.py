"""RDMABuffer: memory any proc can read or write directly, by passing a small handle around.

A proc registers memory (a tensor, a numpy array, a writable memoryview) with
its transport, without copying it, and hands the `RDMABuffer` (it pickles to a
handle of a few hundred bytes) to other actors. They ``read_into`` their own
memory or ``write_from`` it; the owner's actors take no part, so a busy
endpoint does not slow a transfer. Control messages go one way, bulk data
another.
"""

from __future__ import annotations

import asyncio
import math
import sys
import warnings
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from danaus.core.context import context
from danaus.core.errors import MeshStoppedError
from danaus.core.future import Future
from danaus.core.runtime import Runtime
from danaus.core.transport import DeviceMemory, Memory, MemoryHandle, Transport

DEFAULT_TIMEOUT = 60.0


class RDMAFallbackWarning(UserWarning):
    """The transport moves RDMABuffer data over its sockets, not over RDMA hardware."""


class RDMAError(RuntimeError):
    """The owner's side refused a transfer of a buffer (a remote access error): names the buffer.

    ``handle`` is the buffer's handle. On RDMA hardware the owner's NIC refuses
    a transfer whose key or range it does not know: the buffer was dropped, or
    the handle does not describe registered memory.
    """

    def __init__(self, message: str, handle: MemoryHandle | None = None) -> None:
        super().__init__(message)
        self.handle = handle

    def __reduce__(self) -> tuple[Any, ...]:
        return (RDMAError, (str(self), self.handle))


@dataclass(frozen=True)
class Backend:
    """What moves RDMABuffer data on the current transport."""

    name: str
    one_sided: bool
    devices: frozenset[str]
    reason: str = ""
    """Why a transport that can move data one-sided does not here."""

    @property
    def fallback(self) -> bool:
        """True when transfers are not one-sided: the owner's transport serves each one."""
        return not self.one_sided

    def describe(self) -> str:
        if self.fallback:
            because = f" ({self.reason})" if self.reason else ""
            return (
                f"{self.name}: a fallback without one-sided RDMA; a transport thread of the "
                f"owner serves each transfer from the registered memory{because}"
            )
        return f"{self.name}: one-sided transfers; the owner takes no part"


def backend() -> Backend:
    """The RDMA backend of the transport this process runs on."""
    transport = _runtime().transport
    return _backend_of(transport)


def _backend_of(transport: Transport) -> Backend:
    return Backend(
        transport.memory_backend,
        transport.memory_one_sided,
        transport.memory_devices,
        transport.memory_fallback_reason,
    )


def _runtime() -> Runtime:
    return context().actor_instance.runtime


def _device_of(data: Any) -> str:
    return getattr(getattr(data, "device", None), "type", "cpu")


def _check_device(data: Any, transport: Transport) -> None:
    """GPU memory only where the transport can reach it; a clear error elsewhere."""
    device = _device_of(data)
    if device not in transport.memory_devices:
        raise ValueError(
            f"the {transport.memory_backend} RDMA backend cannot reach {device} memory "
            f"(it reaches {', '.join(sorted(transport.memory_devices))} memory)"
        )


def as_bytes(data: Any, *, writable: bool, what: str) -> Memory:
    """A flat byte view of ``data``'s memory, or its `DeviceMemory` on a GPU, without copying it."""
    device = _device_of(data)
    if device != "cpu":
        return _device_memory(data, device, writable=writable, what=what)
    if isinstance(data, memoryview):
        view = data
    elif isinstance(data, (bytes, bytearray)):
        view = memoryview(data)
    elif "torch" in sys.modules and isinstance(data, sys.modules["torch"].Tensor):
        if not data.is_contiguous():
            raise ValueError(f"{what} must be a contiguous tensor")
        flat = data.detach().reshape(-1)
        view = memoryview(flat.view(sys.modules["torch"].uint8).numpy())
    elif hasattr(data, "__array_interface__"):
        if not data.flags["C_CONTIGUOUS"]:
            raise ValueError(f"{what} must be a C-contiguous array")
        view = memoryview(data)
    else:
        raise TypeError(
            f"{what} must be a tensor, a numpy array or a memoryview, not {type(data).__name__}"
        )
    if not view.c_contiguous:
        raise ValueError(f"{what} must be C-contiguous")
    if writable and view.readonly:
        raise ValueError(f"{what} must be writable")
    return view.cast("B") if view.format != "B" or view.ndim != 1 else view


def _device_memory(data: Any, kind: str, *, writable: bool, what: str) -> DeviceMemory:
    """GPU memory, checked: a tensor's own account of it (which does not touch the
    device), else the CUDA array interface (CuPy, Numba)."""
    if "torch" in sys.modules and isinstance(data, sys.modules["torch"].Tensor):
        if not data.is_contiguous():
            raise ValueError(f"{what} must be a contiguous tensor")
        return DeviceMemory(data.data_ptr(), data.numel() * data.element_size(), kind, data)
    interface = getattr(data, "__cuda_array_interface__", None)
    if interface is None:
        raise TypeError(f"{what} on {kind} must expose __cuda_array_interface__")
    shape = tuple(interface["shape"])
    itemsize = int(interface["typestr"][2:])
    strides = interface.get("strides")
    expected = tuple(itemsize * math.prod(shape[i + 1 :]) for i in range(len(shape)))
    if strides is not None and tuple(strides) != expected:
        raise ValueError(f"{what} must be contiguous")
    pointer, readonly = interface["data"]
    if writable and readonly:
        raise ValueError(f"{what} must be writable")
    return DeviceMemory(int(pointer), itemsize * math.prod(shape), kind, data)


_warned = False


class RDMABuffer:
    """Registered memory others can read and write: ``RDMABuffer(tensor)``.

    Accepts a contiguous tensor (a view of one is fine), a C-contiguous numpy
    array, or a C-contiguous writable memoryview; nothing is copied, so keep the
    memory alive while the buffer is in use and do not change it during a
    transfer. It pickles to a small handle: pass it to any actor.
    """

    def __init__(self, data: Any) -> None:
        runtime = _runtime()
        _check_device(data, runtime.transport)
        view = as_bytes(data, writable=True, what="an RDMABuffer's memory")
        if view.nbytes == 0:
            raise ValueError("an RDMABuffer cannot be empty")
        self._handle = runtime.transport.register(view)
        self._data = data
        self._dropped = False
        info = _backend_of(runtime.transport)
        global _warned
        if info.fallback and not _warned:
            _warned = True
            warnings.warn(info.describe(), RDMAFallbackWarning, stacklevel=2)

    @classmethod
    def _from_handle(cls, handle: MemoryHandle) -> RDMABuffer:
        buffer = cls.__new__(cls)
        buffer._handle = handle
        buffer._data = None
        buffer._dropped = False
        return buffer

    def __reduce__(self) -> tuple[Any, ...]:
        return (RDMABuffer._from_handle, (self._handle,))

    def size(self) -> int:
        """The buffer's size in bytes."""
        return self._handle.size

    @property
    def owner(self) -> str:
        """The proc whose memory this is."""
        return self._handle.owner

    @property
    def backend(self) -> str:
        """The transport that moves this buffer's data."""
        return self._handle.backend

    def read_into(self, dst: Any, *, timeout: float = DEFAULT_TIMEOUT) -> Future[None]:
        """Copy the whole buffer into ``dst`` (at least `size` bytes)."""
        return self._read(self._destination(dst), timeout)

    def write_from(self, src: Any, *, timeout: float = DEFAULT_TIMEOUT) -> Future[None]:
        """Copy ``src`` (at most `size` bytes) into the start of the buffer."""
        return self._write(self._source(src), timeout)

    def _destination(self, dst: Any) -> Memory:
        _check_device(dst, _runtime().transport)
        view = as_bytes(dst, writable=True, what="read_into's destination")
        if view.nbytes < self.size():
            raise ValueError(
                f"read_into needs {self.size()} bytes; the destination has {view.nbytes}"
            )
        return view[: self.size()]

    def _source(self, src: Any) -> Memory:
        _check_device(src, _runtime().transport)
        view = as_bytes(src, writable=False, what="write_from's source")
        if view.nbytes > self.size():
            raise ValueError(f"write_from has {view.nbytes} bytes for a buffer of {self.size()}")
        return view

    def _read(self, view: Memory, timeout: float) -> Future[None]:
        return self._transfer(lambda t: t.read(self._handle, 0, view), timeout)

    def _write(self, view: Memory, timeout: float) -> Future[None]:
        return self._transfer(lambda t: t.write(self._handle, 0, view), timeout)

    def drop(self) -> Future[None]:
        """Unregister the memory: later transfers, by anyone, fail."""
        runtime = _runtime()
        self._dropped = True
        runtime.transport.unregister(self._handle)
        return runtime.done()

    def _transfer(
        self, start: Callable[[Transport], Coroutine[Any, Any, None]], timeout: float
    ) -> Future[None]:
        if self._dropped:
            raise MeshStoppedError("this RDMABuffer was dropped")
        runtime = _runtime()
        runtime.watch(self._handle.owner)

        async def run() -> None:
            try:
                await asyncio.wait_for(start(runtime.transport), timeout)
            except asyncio.TimeoutError:
                raise TimeoutError(
                    f"no answer from {self._handle.owner} within {timeout} s"
                ) from None

        return runtime.submit(run())

    def __repr__(self) -> str:
        return f"<RDMABuffer {self.size()} bytes on {self.owner} ({self.backend})>"


class RDMAAction:
    """Several transfers submitted together and run concurrently.

    `read_remote` and `write_remote` are Monarch's current names, local memory
    as ``dst`` or ``src`` like ``memcpy``; `read_into` and `write_from` take
    the buffer first, as before.
    """

    def __init__(self) -> None:
        self._steps: list[Callable[[float], Future[None]]] = []

    def read_remote(self, dst: Any, src: RDMABuffer) -> RDMAAction:
        """Add a read of buffer ``src`` into local memory ``dst`` (checked now)."""
        return self.read_into(src, dst)

    def write_remote(self, dst: RDMABuffer, src: Any) -> RDMAAction:
        """Add a write of local memory ``src`` into buffer ``dst`` (checked now)."""
        return self.write_from(dst, src)

    def read_into(self, buffer: RDMABuffer, dst: Any) -> RDMAAction:
        """Add a read of ``buffer`` into ``dst`` (checked now)."""
        view = buffer._destination(dst)
        self._steps.append(lambda timeout: buffer._read(view, timeout))
        return self

    def write_from(self, buffer: RDMABuffer, src: Any) -> RDMAAction:
        """Add a write of ``src`` into ``buffer`` (checked now)."""
        view = buffer._source(src)
        self._steps.append(lambda timeout: buffer._write(view, timeout))
        return self

    def fetch_add(self, *args: Any, **kwargs: Any) -> RDMAAction:
        raise NotImplementedError("atomic fetch_add is not supported")

    def compare_and_swap(self, *args: Any, **kwargs: Any) -> RDMAAction:
        raise NotImplementedError("atomic compare_and_swap is not supported")

    def submit(self, *, timeout: float = DEFAULT_TIMEOUT) -> Future[None]:
        """Start every transfer at once; the future settles when all are done, or fails with
        the first failure (the others carry on)."""
        futures = [step(timeout) for step in self._steps]
        runtime = _runtime()

        async def all_done() -> None:
            await asyncio.gather(*futures)

        return runtime.submit(all_done())
