"""Unpickling on several threads of a proc at once: the imports it makes, one at a time.

Unpickling imports the modules that the classes and functions it names come
from, and the modules that code pickled by value uses (cloudpickle names them).
An actor class defined in a program's ``__main__`` travels by value, so the
proc that builds it imports what its code uses (torch, say) while it unpickles
it, on that actor's thread. Several such actors spawned at once on one proc
build on several threads at once, and Python's per-module import locks do not
make the first import of a package with import cycles, as torch has, safe from
several threads: one of them may find a module half made (``partially
initialized module``, ``KeyError: 'torch'``).

So the first imports that unpickling makes on a proc happen one at a time,
under one lock (`import_module`). A module already imported is used at once,
without the lock, and a pickle that names no class or function, as the
arguments of most calls, is unpickled by the standard function (`unpickle`).
Imports that running code makes (an ``import`` statement in an endpoint) take
no part: they are made as in any threaded Python program.
"""

from __future__ import annotations

import io
import pickle
import re
import sys
import threading
import types
from typing import Any

from cloudpickle.cloudpickle import subimport

_importing = threading.RLock()
"""Held by the thread whose unpickling imports a module, while it does (reentrant: a
module's import may unpickle and import in turn)."""


def _imported(name: str) -> bool:
    """Whether module ``name`` is in `sys.modules` and has run to its end."""
    module = sys.modules.get(name)
    spec = getattr(module, "__spec__", None)
    return module is not None and not getattr(spec, "_initializing", False)


def import_module(name: str) -> types.ModuleType:
    """Module ``name``, imported now under the proc's import lock if it was not yet."""
    if not _imported(name):
        with _importing:
            __import__(name)
    return sys.modules[name]


class _Unpickler(pickle.Unpickler):
    """The standard unpickler, whose imports go through `import_module`."""

    def find_class(self, module: str, name: str) -> Any:
        if not _imported(module):
            import_module(module)
        found = super().find_class(module, name)
        # cloudpickle's reference to a module that by-value code uses imports it: the same.
        return import_module if found is subimport else found


STACK_GLOBAL = pickle.STACK_GLOBAL[0]
"""The opcode by which a pickle of protocol 4 or later names each class or function, as an
int: finding an int in bytes is a ``memchr``, a tenth of the cost of finding a one-byte string.
A pickle without it cannot import; the same byte within data only makes a check cautious."""

find_stack_global = re.compile(re.escape(pickle.STACK_GLOBAL)).search
"""Finds `STACK_GLOBAL` in any buffer (a memoryview too), in C, with no call of Python's."""


def names_globals(data: bytes | bytearray | memoryview) -> bool:
    """Whether a pickle of protocol 4 or later may name a class or function, and so import."""
    if type(data) is bytes:
        return STACK_GLOBAL in data
    return find_stack_global(data) is not None


def unpickle_importing(data: bytes | bytearray | memoryview, buffers: Any = ()) -> Any:
    """``pickle.loads(data, buffers=buffers)``, its imports one at a time on this proc."""
    return _Unpickler(io.BytesIO(data), buffers=buffers).load()


def unpickle(data: bytes | bytearray | memoryview, buffers: Any = ()) -> Any:
    """``pickle.loads(data, buffers=buffers)``, for a pickle of protocol 4 or later, whose
    first imports happen one at a time on this proc (see the module docstring)."""
    if names_globals(data):
        return unpickle_importing(data, buffers)
    return pickle.loads(data, buffers=buffers)
