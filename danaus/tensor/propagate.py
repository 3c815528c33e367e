"""What an operation on handles returns, found without data: shapes, strides, dtypes, aliasing.

The first time an operator meets a given set of input shapes (and other
arguments), it runs on meta tensors: torch's tensors with metadata and no
storage, whose operators (the same meta kernels ``FakeTensorMode`` uses) work
out shapes, strides, dtypes and aliasing without touching data. The device of
the results is the one the operator names, else its first tensor argument's.
What it returned, which inputs it returned as they were (in-place and
``out=`` operators), which outputs are views of an input, and which inputs it
wrote to, are kept under that key; later calls with the same key cost a
dictionary look-up, since an operator on meta tensors costs tens of
microseconds here and a look-up a fraction of one (and making a
``FakeTensorMode`` costs seconds, as it loads torch's compiler).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import torch
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import _disable_current_modes

Meta = tuple[Any, ...]
"""A tensor's metadata as ``(HANDLE, sizes, strides, storage offset, dtype, device)``;
`HANDLE` keeps it apart from any tuple a user passes."""

HANDLE = object()
"""The first item of every `Meta`."""

CACHE_LIMIT = 16384
"""Entries kept before the cache starts again (programs use far fewer)."""


class Output(NamedTuple):
    """One tensor of an operation's result."""

    same: int
    """The index of the input it is (in-place and ``out=`` operators), else -1."""
    meta: Meta
    view_of: int
    """The index of the input whose storage it shares (a view), else -1."""


class Propagated(NamedTuple):
    """What an operation returns, as handles need it."""

    outputs: tuple[Output, ...]
    spec: pytree.TreeSpec | None
    """How the result is built from its leaves; None when it is a single tensor."""
    leaves: tuple[Any, ...]
    """The result's leaves: `OUT` for each tensor (in order), other values as they are."""
    mutated: tuple[int, ...]
    """The indices of the inputs the operation writes to."""


OUT = object()
"""Stands for a tensor among a result's leaves."""


def meta_of(tensor: torch.Tensor) -> Meta:
    """The metadata of a tensor, as `Meta`."""
    return (
        HANDLE,
        tuple(tensor.shape),
        tuple(tensor.stride()),
        tensor.storage_offset(),
        tensor.dtype,
        tensor.device,
    )


def contiguous_meta(sizes: Sequence[int], dtype: torch.dtype, device: torch.device) -> Meta:
    """The metadata of a new contiguous tensor."""
    strides = []
    step = 1
    for size in reversed(sizes):
        strides.append(step)
        step *= max(size, 1)
    return (HANDLE, tuple(sizes), tuple(reversed(strides)), 0, dtype, device)


def _on_meta(meta: Meta) -> torch.Tensor:
    """A meta tensor (metadata, no storage) with ``meta``'s sizes, strides and offset."""
    _, sizes, strides, offset, dtype, _ = meta
    extent = 1 + sum((s - 1) * st for s, st in zip(sizes, strides) if s > 0)
    if math.prod(sizes) == 0:
        extent = 0
    storage = torch.empty(offset + extent, dtype=dtype, device="meta")
    return storage.as_strided(sizes, strides, offset)


def _to_meta(value: Any, devices: list[torch.device]) -> Any:
    """An argument for a run on meta tensors: devices become ``meta`` (the first noted)."""
    if isinstance(value, torch.device) or (isinstance(value, str) and value in _DEVICE_NAMES):
        devices.append(torch.device(value))
        return torch.device("meta")
    return value


_DEVICE_NAMES = frozenset(("cpu", "cuda"))
_cache: dict[Any, Propagated] = {}


def propagate(
    key: Any,
    run: Callable[..., Any],
    args: Any,
    kwargs: Any,
    inputs: Sequence[Meta | torch.Tensor],
    place: Callable[[Any, list[torch.Tensor]], tuple[Any, Any]],
) -> Propagated:
    """What ``run`` returns for inputs of this shape, from the cache or by running it on meta
    tensors.

    ``inputs`` are the metadata of the handles among the arguments (or local
    tensors, as they are), in the order ``place(args_and_kwargs, metas)`` puts
    their meta tensors back into ``(args, kwargs)``.
    """
    found = _cache.get(key)
    if found is not None:
        return found
    found = _run_on_meta(run, args, kwargs, inputs, place)
    if key is not None:
        if len(_cache) >= CACHE_LIMIT:
            _cache.clear()
        _cache[key] = found
    return found


def _run_on_meta(
    run: Callable[..., Any],
    args: Any,
    kwargs: Any,
    inputs: Sequence[Meta | torch.Tensor],
    place: Callable[[Any, list[torch.Tensor]], tuple[Any, Any]],
) -> Propagated:
    devices: list[torch.device] = []
    with _disable_current_modes(), torch.device("meta"):
        metas = [
            _on_meta(meta_of(item) if isinstance(item, torch.Tensor) else item) for item in inputs
        ]
        versions = [m._version for m in metas]
        meta_args, meta_kwargs = place((args, kwargs), metas)
        meta_args = tuple(_to_meta(a, devices) for a in meta_args)
        meta_kwargs = {k: _to_meta(v, devices) for k, v in meta_kwargs.items()}
        if meta_kwargs.get("pin_memory"):
            meta_kwargs["pin_memory"] = False
        try:
            result = run(*meta_args, **meta_kwargs)
        except Exception as exc:
            raise RuntimeError(
                f"{_name(run)}: the shape of its result cannot be worked out without data "
                f"({type(exc).__name__}: {exc}); fetch the values with danaus.inspect, or "
                "compute it in a danaus.remote function with an explicit propagate="
            ) from None
    device = devices[0] if devices else _device_of(inputs)
    if isinstance(run, torch._ops.OpOverload):
        mutated = _written(run, meta_args, meta_kwargs, metas)
    else:
        mutated = tuple(i for i, m in enumerate(metas) if m._version > versions[i])
    if isinstance(result, torch.Tensor):
        return Propagated((_output(result, metas, device),), None, (OUT,), mutated)
    leaves, spec = pytree.tree_flatten(result)
    outputs = tuple(
        _output(leaf, metas, device) for leaf in leaves if isinstance(leaf, torch.Tensor)
    )
    marked = tuple(OUT if isinstance(leaf, torch.Tensor) else leaf for leaf in leaves)
    return Propagated(outputs, spec, marked, mutated)


def _written(
    op: torch._ops.OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any], metas: list[Any]
) -> tuple[int, ...]:
    """The indices of the inputs an operator writes to, from its schema.

    Not from version counters: inside ``__torch_dispatch__`` the dispatcher skips the
    keys that count versions, for the operators run there too.
    """
    written = []
    for index, argument in enumerate(op._schema.arguments):
        if argument.alias_info is None or not argument.alias_info.is_write:
            continue
        value = args[index] if index < len(args) else kwargs.get(argument.name)
        for item in value if isinstance(value, (list, tuple)) else (value,):
            written.extend(i for i, meta in enumerate(metas) if meta is item)
    return tuple(sorted(set(written)))


def _device_of(inputs: Sequence[Meta | torch.Tensor]) -> torch.device:
    """The device of an operation's first tensor argument (CPU without one)."""
    for item in inputs:
        return item.device if isinstance(item, torch.Tensor) else item[5]
    return torch.device("cpu")


def _output(result: torch.Tensor, inputs: list[torch.Tensor], device: torch.device) -> Output:
    same = next((i for i, item in enumerate(inputs) if item is result), -1)
    view_of = -1
    if same < 0:
        storage = result.untyped_storage()._cdata
        view_of = next(
            (i for i, item in enumerate(inputs) if item.untyped_storage()._cdata == storage), -1
        )
    _, sizes, strides, offset, dtype, _ = meta_of(result)
    return Output(same, (HANDLE, sizes, strides, offset, dtype, device), view_of)


def _name(run: Callable[..., Any]) -> str:
    return (
        str(run) if isinstance(run, torch._ops.OpOverload) else getattr(run, "__name__", repr(run))
    )
