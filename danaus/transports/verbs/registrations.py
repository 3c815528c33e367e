"""Registered memory, and the cache that makes registering the same memory again free.

Registering memory pins its pages and costs a system call per region (tens of
microseconds, and more per gigabyte), so the memory a transfer reads into or
writes from, and the large frames a peer reads, are looked up first: memory
inside a region already registered with at least the access wanted reuses
that region. Each use pins its region. When the last pin goes, the region
stays registered, idle, while the idle regions' bytes fit in ``cache_bytes``,
the least recently used going first.

The memory of an `RDMABuffer` is always registered anew, so that each buffer
has a key of its own, and it is deregistered when the buffer is dropped (its
last pin goes): from then on its key opens nothing. Transfers of this process
may reuse its region meanwhile, and keep it registered until they end.

A cached region keeps the object whose memory it covers alive (the cache
holds a reference), so its pages cannot be freed and reused under it: a
stale registration is impossible, at the price of that memory staying
allocated while cached.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from danaus.core.transport import DeviceMemory, Memory
from danaus.transports.verbs.address import address_of
from danaus.transports.verbs.device import Access, Device, MemoryRegion

DEFAULT_CACHE_BYTES = 256 << 20

GpuRegistrar = Callable[[Device, DeviceMemory, Access], MemoryRegion]


@dataclass(eq=False)
class _Entry:
    region: MemoryRegion
    access: Access
    kind: str
    pins: int = 0

    def covers(self, address: int, length: int, access: Access, kind: str) -> bool:
        region = self.region
        return (
            kind == self.kind
            and access & self.access == access
            and region.address <= address
            and address + length <= region.address + region.length
        )


@dataclass(eq=False)
class Pin:
    """A use of registered memory: ``length`` bytes from ``address``, held until released."""

    entry: _Entry
    address: int
    length: int
    released: bool = field(default=False)

    @property
    def lkey(self) -> int:
        return self.entry.region.lkey

    @property
    def rkey(self) -> int:
        return self.entry.region.rkey

    def iova(self, offset: int = 0) -> int:
        """The address work requests use for byte ``offset`` of the pinned memory."""
        return self.entry.region.translate(self.address + offset)


class Registrations:
    """This process's memory registered with one device. Thread-safe."""

    def __init__(
        self,
        device: Device,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
        gpu: GpuRegistrar | None = None,
    ) -> None:
        self._device = device
        self._cache_bytes = cache_bytes
        self._gpu = gpu
        self._lock = threading.Lock()
        self._entries: list[_Entry] = []
        self._idle: OrderedDict[_Entry, None] = OrderedDict()
        self._idle_bytes = 0
        self.registered = 0
        """Regions registered with the device so far (misses of the cache)."""

    def pin(
        self, memory: Memory, access: Access, *, own: bool = False, private: bool = False
    ) -> Pin:
        """Registered memory covering ``memory`` with at least ``access``; release it after use.

        ``own``: a registration of its own (an `RDMABuffer`'s), which later
        pins may share. ``private``: a registration for this use alone, outside
        the cache (memory that will not be used again, such as a received
        buffer handed to the program).
        """
        if isinstance(memory, DeviceMemory):
            address, length, kind = memory.address, memory.nbytes, memory.device
        else:
            address, length, kind = address_of(memory), memory.nbytes, "cpu"
        with self._lock:
            entry = None if own or private else self._find(address, length, access, kind)
            if entry is None:
                entry = _Entry(self._register(memory, address, length, access), access, kind)
                self.registered += 1
                if not private:
                    self._entries.append(entry)
            elif entry in self._idle:
                del self._idle[entry]
                self._idle_bytes -= entry.region.length
            entry.pins += 1
            return Pin(entry, address, length)

    def release(self, pin: Pin) -> None:
        """The use of ``pin`` is over (again: nothing)."""
        if pin.released:
            return
        pin.released = True
        with self._lock:
            entry = pin.entry
            entry.pins -= 1
            if entry.pins:
                return
            if entry.access & Access.REMOTE_WRITE or entry not in self._entries:
                self._drop(entry)
                return
            self._idle[entry] = None
            self._idle_bytes += entry.region.length
            while self._idle_bytes > self._cache_bytes:
                oldest, _ = self._idle.popitem(last=False)
                self._idle_bytes -= oldest.region.length
                self._drop(oldest)

    def close(self) -> None:
        """Deregister everything (the device is closing)."""
        with self._lock:
            for entry in self._entries:
                self._device.deregister(entry.region)
            self._entries.clear()
            self._idle.clear()
            self._idle_bytes = 0

    def _find(self, address: int, length: int, access: Access, kind: str) -> _Entry | None:
        for entry in reversed(self._entries):
            if entry.covers(address, length, access, kind):
                return entry
        return None

    def _register(self, memory: Memory, address: int, length: int, access: Access) -> MemoryRegion:
        if isinstance(memory, DeviceMemory):
            if self._gpu is None:
                raise ValueError(f"this device cannot register {memory.device} memory")
            return self._gpu(self._device, memory, access)
        return self._device.register(address, length, access, memory)

    def _drop(self, entry: _Entry) -> None:
        if entry in self._entries:
            self._entries.remove(entry)
        self._device.deregister(entry.region)
