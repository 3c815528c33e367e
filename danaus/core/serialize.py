"""Pickling for messages: cloudpickle, with large buffers kept out of band.

``dumps`` returns a list of frames: the pickle stream first, then one frame per
large buffer (numpy arrays, CPU torch tensors, big bytes/bytearray/memoryview),
which a transport can send without copying. Received numpy arrays, tensors and
memoryviews use the frame's memory, which is writable and the receiver's own (a
read-only frame is copied first); bytes and bytearray, which own their memory,
are copied once on arrival, unless a transport received the frame into
`bytes_storage` (or filled a kept one again, `storage_again`). Classes and functions defined in
``__main__``, in test modules or in notebooks travel by value (cloudpickle), so
they work in worker processes that cannot import them.

Any thread may unpickle: the imports that unpickling makes happen one at a
time (`danaus.core.imports`).
"""

from __future__ import annotations

import ctypes
import io
import marshal
import operator
import pickle
import sys
import types
from collections.abc import Sequence
from typing import Any

import cloudpickle

from danaus.core.errors import SerializationError
from danaus.core.imports import (
    STACK_GLOBAL,
    find_stack_global,
    import_module,
    unpickle_importing,
)

Buffer = bytes | bytearray | memoryview

# Below this size a buffer is cheaper to copy into the pickle stream than to
# carry in a frame of its own.
OUT_OF_BAND_MIN = 64 * 1024


_new_bytes = ctypes.pythonapi.PyBytes_FromStringAndSize
_new_bytes.restype = ctypes.py_object
_new_bytes.argtypes = (ctypes.c_void_p, ctypes.c_ssize_t)

_BYTES_DATA = bytes.__basicsize__ - 1
"""How far a bytes object's data lies from its address (CPython's layout: the header, then
the bytes and a final zero byte, which ``__basicsize__`` counts)."""


def bytes_storage(nbytes: int) -> memoryview:
    """A writable view of the storage of a new bytes object of ``nbytes`` bytes, not yet filled.

    For a transport receiving a large frame. Filled in place and then given to
    `loads`, the frame rebuilds a ``bytes`` value as that very object instead of
    a copy, which on a small VM costs the receiving thread about 60 µs a MiB.
    The object is written only before anything else holds it, as CPython's own
    constructors fill theirs; an array or tensor rebuilt from the frame uses its
    memory as it would any other frame's.
    """
    return _storage(_new_bytes(None, nbytes))


def _storage(owner: bytes) -> memoryview:
    """A writable view of ``owner``'s bytes, which refers to ``owner``."""
    storage = (ctypes.c_char * len(owner)).from_address(id(owner) + _BYTES_DATA)
    storage.owner = owner
    return memoryview(storage).cast("B")


_BYTES_HASH = _BYTES_DATA - ctypes.sizeof(ctypes.c_ssize_t)
"""Where a bytes object keeps its hash once computed (-1: not yet), just before its data."""


def _hash_slot_found() -> bool:
    """Whether `_BYTES_HASH` is where this interpreter keeps a bytes object's hash."""
    probe = bytes_storage(8).obj.owner
    hash(probe)
    return ctypes.c_ssize_t.from_address(id(probe) + _BYTES_HASH).value == hash(probe)


_REFILLABLE = _hash_slot_found()


def storage_again(owner: bytes) -> memoryview | None:
    """A writable view of the storage of ``owner``, made by `bytes_storage`, to fill again;
    None where this interpreter's bytes are laid out otherwise.

    Only for an object that nothing but the caller refers to (its reference
    count says so), since its value changes: the hash it may have cached is
    forgotten. A transport keeps the bytes of large frames it received and
    fills them again, which spares the kernel mapping and zeroing fresh memory
    for the next frame of that size (for 64 MiB, up to 30 ms of CPU on a small VM).
    """
    if not _REFILLABLE:
        return None
    ctypes.c_ssize_t.from_address(id(owner) + _BYTES_HASH).value = -1
    return _storage(owner)


def _rebuild_bytes(buffer: memoryview) -> bytes:
    view = memoryview(buffer)
    storage = view.obj
    if isinstance(storage, ctypes.Array) and _owns_all(getattr(storage, "owner", None), view):
        return storage.owner
    return bytes(view)


def _owns_all(owner: object, view: memoryview) -> bool:
    """Whether ``view`` is all of the storage of ``owner``, a bytes object (`bytes_storage`)."""
    return (
        type(owner) is bytes
        and len(owner) == view.nbytes
        and ctypes.addressof(view.obj) == id(owner) + _BYTES_DATA
    )


def _rebuild_bytearray(buffer: memoryview) -> bytearray:
    return bytearray(buffer)


def _rebuild_memoryview(buffer: memoryview, fmt: str, shape: tuple[int, ...]) -> memoryview:
    return memoryview(buffer).cast("B").cast(fmt, shape)


def _rebuild_tensor(buffer: Any, dtype: Any, shape: tuple[int, ...], requires_grad: bool) -> Any:
    torch = import_module("torch")
    view = memoryview(buffer)
    if view.nbytes == 0:
        tensor = torch.empty(shape, dtype=dtype)
    else:
        tensor = torch.frombuffer(view, dtype=torch.uint8).view(dtype).reshape(shape)
    return tensor.requires_grad_(requires_grad) if requires_grad else tensor


def _tensor_reduction(obj: Any) -> tuple[Any, ...] | None:
    """Out-of-band reduction for a plain dense CPU tensor, or None to let torch pickle it."""
    torch = sys.modules["torch"]
    if (
        type(obj) is not torch.Tensor
        or obj.device.type != "cpu"
        or obj.layout != torch.strided
        or obj.is_quantized
        or obj.is_conj()
        or obj.is_neg()
        or (obj.requires_grad and obj.grad_fn is not None)
    ):
        return None
    flat = obj.detach().contiguous().reshape(-1)
    raw = flat.view(torch.uint8).numpy() if flat.numel() else b""
    return (
        _rebuild_tensor,
        (pickle.PickleBuffer(raw), obj.dtype, tuple(obj.shape), obj.requires_grad),
    )


class _OutOfBand:
    """Wraps a large bytes or bytearray so that it pickles out of band.

    The C pickler writes bytes and bytearray itself, without asking
    ``reducer_override``; wrapping them first is the only way to keep them out of
    the pickle stream.
    """

    __slots__ = ("data",)

    def __init__(self, data: bytes | bytearray) -> None:
        self.data = data

    def __reduce__(self) -> tuple[Any, ...]:
        rebuild = _rebuild_bytes if type(self.data) is bytes else _rebuild_bytearray
        return (rebuild, (pickle.PickleBuffer(self.data),))


LIFT_MAX_ITEMS = 64
"""Longer containers are not looked into: a walk in Python would cost more than the copy saves."""

_CONTAINERS = (tuple, list, dict)


def _lift(obj: Any, depth: int = 3) -> Any:
    """``obj`` with large bytes and bytearrays wrapped out of band, also in small containers."""
    kind = type(obj)
    if kind is bytes or kind is bytearray:
        return _OutOfBand(obj) if len(obj) >= OUT_OF_BAND_MIN else obj
    if depth == 0 or kind not in _CONTAINERS or len(obj) > LIFT_MAX_ITEMS:
        return obj
    items = list(obj.values()) if kind is dict else obj
    lifted = [_lift(item, depth - 1) for item in items]
    if all(map(operator.is_, lifted, items)):
        return obj
    return dict(zip(obj, lifted)) if kind is dict else kind(lifted)


class _Pickler(cloudpickle.Pickler):
    def reducer_override(self, obj: Any) -> Any:
        kind = type(obj)
        if kind is memoryview:
            if obj.nbytes >= OUT_OF_BAND_MIN and obj.c_contiguous:
                return (
                    _rebuild_memoryview,
                    (pickle.PickleBuffer(obj), obj.format, obj.shape),
                )
        elif kind is types.CodeType:
            # marshal keeps the code's file name, which tracebacks and pdb show and which
            # cloudpickle (3.1.3 and newer) replaces with a placeholder.
            return (marshal.loads, (marshal.dumps(obj),))
        elif "torch" in sys.modules and isinstance(obj, sys.modules["torch"].Tensor):
            reduction = _tensor_reduction(obj)
            if reduction is not None:
                return reduction
        return super().reducer_override(obj)


_SCALARS = frozenset((int, float, bool, str, type(None)))
"""Types that cloudpickle pickles exactly as pickle does (no reducer looks at them), and
pickle does without the cost of making a cloudpickle pickler (several times their own)."""

PLAIN_MAX_ITEMS = 8
"""Containers up to this length are looked into for `_plain`."""


def _plain(obj: Any, depth: int = 2) -> bool:
    """Whether ``obj`` is a scalar, or a short tuple, list or dict of such (``depth`` levels).

    Such a value, as the arguments ``((1, "x"), {})`` of most calls, pickles the
    same with pickle as with cloudpickle, and holds no buffer to send out of band.
    """
    kind = type(obj)
    if kind in _SCALARS:
        return True
    if depth == 0 or kind not in _CONTAINERS or len(obj) > PLAIN_MAX_ITEMS:
        return False
    if kind is dict:
        for key, value in obj.items():
            if type(key) not in _SCALARS or not _plain(value, depth - 1):
                return False
        return True
    for item in obj:  # noqa: SIM110 - all() over a generator costs twice as much, per message
        if not _plain(item, depth - 1):
            return False
    return True


def dumps(obj: Any, what: str = "value", *about: object) -> list[Buffer]:
    """Pickle ``obj`` into frames; raise `SerializationError` naming ``what`` on failure.

    Given ``about``, the name is ``what % about``, formatted only on failure: an
    actor's every answer names itself, and most pickle.
    """
    if _plain(obj):
        return [pickle.dumps(obj, 5)]
    buffers: list[pickle.PickleBuffer] = []
    stream = io.BytesIO()
    try:
        _Pickler(stream, protocol=5, buffer_callback=buffers.append).dump(_lift(obj))
    except Exception as exc:
        name = what % about if about else what
        raise SerializationError(f"{name} cannot be pickled: {exc}") from exc
    return [stream.getvalue(), *(b.raw() for b in buffers)]


def loads(frames: Sequence[Buffer]) -> Any:
    """Unpickle frames made by `dumps`.

    Arrays, tensors and memoryviews rebuilt from out-of-band frames use the
    frames' memory, so each frame must be writable and the receiver's own; a
    read-only one (a small zmq frame, say) is copied first.
    """
    head = frames[0]
    # A single frame is the most common case: no list of no buffers to build.
    buffers = () if len(frames) == 1 else [_writable(frame) for frame in frames[1:]]
    # A pickle that names no class or function cannot import: the standard path, with no call
    # of Python's to decide it (most messages are such, and arrive as bytes or memoryviews).
    if STACK_GLOBAL not in head if type(head) is bytes else find_stack_global(head) is None:
        return pickle.loads(head, buffers=buffers)
    return unpickle_importing(head, buffers)


def _writable(frame: Buffer) -> Buffer:
    view = memoryview(frame)
    return bytearray(view) if view.readonly else frame


def nbytes(frames: Sequence[Buffer]) -> int:
    """The size of ``frames`` in bytes.

    A bytes frame's length is its size, read without the memoryview that any
    other buffer needs (making one costs more than the rest of the sum): the
    frames of most messages are bytes, and this runs for every one a trace records.
    """
    total = 0
    for frame in frames:
        total += len(frame) if type(frame) is bytes else memoryview(frame).nbytes
    return total
