"""The address of a buffer's first byte, for memory registration and work requests."""

from __future__ import annotations

import ctypes
from typing import Any


class _PyBuffer(ctypes.Structure):
    """CPython's ``Py_buffer``."""

    _fields_ = [
        ("buf", ctypes.c_void_p),
        ("obj", ctypes.c_void_p),
        ("len", ctypes.c_ssize_t),
        ("itemsize", ctypes.c_ssize_t),
        ("readonly", ctypes.c_int),
        ("ndim", ctypes.c_int),
        ("format", ctypes.c_char_p),
        ("shape", ctypes.c_void_p),
        ("strides", ctypes.c_void_p),
        ("suboffsets", ctypes.c_void_p),
        ("internal", ctypes.c_void_p),
    ]


_get_buffer = ctypes.pythonapi.PyObject_GetBuffer
_get_buffer.argtypes = [ctypes.py_object, ctypes.POINTER(_PyBuffer), ctypes.c_int]
_get_buffer.restype = ctypes.c_int
_release_buffer = ctypes.pythonapi.PyBuffer_Release
_release_buffer.argtypes = [ctypes.POINTER(_PyBuffer)]
_release_buffer.restype = None


def address_of(buffer: Any) -> int:
    """Where ``buffer``'s memory starts (read-only buffers too, which ctypes refuses)."""
    view = _PyBuffer()
    if _get_buffer(buffer, ctypes.byref(view), 0) != 0:
        raise TypeError(f"{type(buffer).__name__} does not expose its memory")
    try:
        return int(view.buf or 0)
    finally:
        _release_buffer(ctypes.byref(view))
