"""The one-sided RDMA library (``rma.cpp``) as Python calls, through ctypes.

ctypes releases the GIL for the length of every call, and the library never
takes it: its thread calls no Python. Each `NativeRma` is one UCP context and
worker with the thread that drives them (see ``rma.cpp``).
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from pathlib import Path

DROPPED = 1
"""Status of a transfer whose buffer's owner dropped it (UCX's own statuses are 0 or negative)."""
BAD_KEY = 2
"""Status of a transfer whose remote key does not unpack."""
CLOSED = 3
"""Status of a transfer whose connection was closed before it could finish."""

KEY_CAPACITY = 4096
ADDRESS_CAPACITY = 16384
ERROR_CAPACITY = 1024
COMPLETIONS_BATCH = 256

_void = ctypes.c_void_p
_size = ctypes.c_size_t
_u64 = ctypes.c_uint64
_char_p = ctypes.c_char_p
_SIGNATURES: dict[str, tuple[object, list[object]]] = {
    "danaus_rma_open": (_void, [_char_p, _char_p, _size]),
    "danaus_rma_shutdown": (None, [_void]),
    "danaus_rma_eventfd": (ctypes.c_int, [_void]),
    "danaus_rma_memory_types": (_u64, [_void]),
    "danaus_rma_address": (_size, [_void, _char_p, _size]),
    "danaus_rma_map": (_void, [_void, _void, _size, ctypes.c_int, _char_p, _size]),
    "danaus_rma_region": (
        None,
        [
            _void,
            _char_p,
            ctypes.POINTER(_size),
            ctypes.POINTER(_u64),
            _char_p,
            ctypes.POINTER(_size),
            ctypes.POINTER(_u64),
        ],
    ),
    "danaus_rma_unmap": (None, [_void, _void, _u64]),
    "danaus_rma_peer": (_void, [_char_p, _size]),
    "danaus_rma_submit": (
        None,
        [
            _void,
            _void,
            _u64,
            ctypes.c_int,
            _void,
            _size,
            ctypes.c_int,
            _u64,
            _char_p,
            _size,
            _u64,
            _char_p,
            _size,
            _u64,
        ],
    ),
    "danaus_rma_close": (None, [_void, _void]),
    "danaus_rma_completions": (
        _size,
        [_void, ctypes.POINTER(_u64), ctypes.POINTER(ctypes.c_int32), _size],
    ),
    "danaus_rma_cuda_type": (ctypes.c_int, []),
    "danaus_rma_status": (_char_p, [ctypes.c_int]),
}


def load(path: Path) -> ctypes.CDLL:
    """The library at ``path``, with every function's signature declared."""
    library = ctypes.CDLL(str(path))
    for name, (result, arguments) in _SIGNATURES.items():
        function = getattr(library, name)
        function.restype = result
        function.argtypes = arguments
    return library


@dataclass(frozen=True)
class Region:
    """A registration in this process: what a peer needs to reach it, and the native pointer."""

    pointer: int
    key: bytes
    cell: int
    cell_key: bytes
    generation: int


class NativeRma:
    """One UCP context and worker for one-sided transfers, and the thread that drives them."""

    def __init__(self, library: ctypes.CDLL, net_devices: str) -> None:
        """``net_devices``, unless empty, are the only network devices UCX may use."""
        self._lib = library
        error = ctypes.create_string_buffer(ERROR_CAPACITY)
        service = library.danaus_rma_open(net_devices.encode(), error, ERROR_CAPACITY)
        if not service:
            raise OSError(f"UCX refused a context for one-sided transfers: {error.value.decode()}")
        self._service = service
        self.eventfd: int = library.danaus_rma_eventfd(service)
        self.cuda_type: int = library.danaus_rma_cuda_type()
        self._tokens = (_u64 * COMPLETIONS_BATCH)()
        self._statuses = (ctypes.c_int32 * COMPLETIONS_BATCH)()

    def memory_types(self) -> int:
        """A bit per ``ucs_memory_type_t`` that UCX can register in this process."""
        return int(self._lib.danaus_rma_memory_types(self._service))

    def address(self) -> bytes:
        """The worker's address, which peers connect to."""
        out = ctypes.create_string_buffer(ADDRESS_CAPACITY)
        length = self._lib.danaus_rma_address(self._service, out, ADDRESS_CAPACITY)
        if not length:
            raise OSError("UCX gave no address for the one-sided worker")
        return out.raw[:length]

    def map(self, address: int, length: int, memory_type: int) -> Region:
        """Register ``length`` bytes at ``address``, of UCX memory type ``memory_type``."""
        error = ctypes.create_string_buffer(ERROR_CAPACITY)
        pointer = self._lib.danaus_rma_map(
            self._service, address, length, memory_type, error, ERROR_CAPACITY
        )
        if not pointer:
            raise OSError(error.value.decode())
        key = ctypes.create_string_buffer(KEY_CAPACITY)
        cell_key = ctypes.create_string_buffer(KEY_CAPACITY)
        key_size, cell_key_size = _size(KEY_CAPACITY), _size(KEY_CAPACITY)
        cell, generation = _u64(), _u64()
        self._lib.danaus_rma_region(
            pointer,
            key,
            ctypes.byref(key_size),
            ctypes.byref(cell),
            cell_key,
            ctypes.byref(cell_key_size),
            ctypes.byref(generation),
        )
        if not key_size.value or not cell_key_size.value:
            self._lib.danaus_rma_unmap(self._service, pointer, 0)
            raise OSError(f"UCX packed a remote key of more than {KEY_CAPACITY} bytes")
        return Region(
            pointer,
            key.raw[: key_size.value],
            cell.value,
            cell_key.raw[: cell_key_size.value],
            generation.value,
        )

    def unmap(self, region: Region, token: int) -> None:
        """Drop ``region`` now; ``token`` completes once nothing of the worker's still uses it."""
        self._lib.danaus_rma_unmap(self._service, region.pointer, token)

    def peer(self, address: bytes) -> int:
        """A connection-to-be to the worker at ``address`` (made by its first transfer)."""
        return int(self._lib.danaus_rma_peer(address, len(address)))

    def close(self, peer: int) -> None:
        """Close ``peer`` at once (its transfers under way complete) and free it."""
        self._lib.danaus_rma_close(self._service, peer)

    def submit(
        self,
        peer: int,
        token: int,
        write: bool,
        local: int,
        length: int,
        local_type: int,
        remote: int,
        key: bytes,
        cell: int,
        cell_key: bytes,
        generation: int,
    ) -> None:
        """Start a get into (or a put from) ``local``; ``token`` completes with its status."""
        self._lib.danaus_rma_submit(
            self._service,
            peer,
            token,
            int(write),
            local,
            length,
            local_type,
            remote,
            key,
            len(key),
            cell,
            cell_key,
            len(cell_key),
            generation,
        )

    def completions(self) -> list[tuple[int, int]]:
        """The (token, status) pairs finished since the last call."""
        done: list[tuple[int, int]] = []
        while True:
            count = self._lib.danaus_rma_completions(
                self._service, self._tokens, self._statuses, COMPLETIONS_BATCH
            )
            done += [(self._tokens[i], self._statuses[i]) for i in range(count)]
            if count < COMPLETIONS_BATCH:
                return done

    def status_text(self, status: int) -> str:
        return self._lib.danaus_rma_status(status).decode()

    def shutdown(self) -> None:
        """Stop the thread and release the worker and the context (once)."""
        if self._service:
            self._lib.danaus_rma_shutdown(self._service)
            self._service = None
