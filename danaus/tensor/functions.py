"""How a function travels to the procs: by import path when it has one, else pickled by value.

An aten operator goes by name; a function defined at the top of an importable
module (not ``__main__``, not a test module) by its path, imported on each
proc; anything else (a lambda, a function of ``__main__``) by value, with
cloudpickle (`danaus.core.serialize`, which keeps its code's file name for tracebacks). A
``"module.name"`` string names a function by path.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import torch

from danaus.core.serialize import dumps, loads


def definition(fn: Any) -> tuple[str, Any]:
    """``(what, payload)`` for `resolve` on a proc."""
    if isinstance(fn, torch._ops.OpOverload):
        namespace, _, name = fn._schema.name.partition("::")
        return "op", (namespace, name, fn._overloadname)
    if isinstance(fn, str):
        if "." not in fn:
            raise ValueError(f"a remote function named by a string needs a module: {fn!r}")
        return "path", fn
    path = _import_path(fn)
    if path is not None:
        return "path", path
    return "pickled", dumps(fn, "a remote function")


def _import_path(fn: Any) -> str | None:
    module = getattr(fn, "__module__", None)
    name = getattr(fn, "__qualname__", None)
    if module in (None, "__main__") or name is None or "<" in name:
        return None
    loaded = sys.modules.get(module)
    if loaded is None or "pytest" in type(getattr(loaded, "__loader__", None)).__module__:
        return None
    found: Any = loaded
    for part in name.split("."):
        found = getattr(found, part, None)
    if found is fn or getattr(found, "_remote_impl", None) is fn:
        return f"{module}.{name}"
    return None


def resolve(what: str, payload: Any) -> Any:
    """The function a `definition` stands for (on a proc)."""
    if what == "op":
        namespace, name, overload = payload
        return getattr(getattr(getattr(torch.ops, namespace), name), overload)
    if what == "path":
        module, _, name = payload.rpartition(".")
        found: Any = importlib.import_module(module)
        for part in name.split("."):
            found = getattr(found, part)
        return getattr(found, "_remote_impl", found)
    return loads(payload)
