"""What an operation on handles returns, found without data: shapes, strides, dtypes, aliasing.

The first time an operator meets a given set of input shapes (and other
arguments), it runs on fake tensors (torch's ``FakeTensorMode``): tensors with
metadata and no storage. What it returned, which inputs it returned as they
were (in-place and ``out=`` operators), which outputs are views of an input,
and which inputs it wrote to, are kept under that key; later calls with the
same key cost a dictionary look-up, since a fake operator costs about a
hundred microseconds and a look-up a fraction of one.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import torch
from torch._subclasses.fake_tensor import (
    DataDependentOutputException,
    DynamicOutputShapeException,
    FakeTensorMode,
)
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


class _Fakes:
    """The fake mode, made on first use (making one costs a few milliseconds)."""

    mode: FakeTensorMode | None = None

    @classmethod
    def get(cls) -> FakeTensorMode:
        if cls.mode is None:
            cls.mode = FakeTensorMode()
        return cls.mode


def _fake_of(meta: Meta) -> torch.Tensor:
    """A fake tensor with ``meta``'s metadata (call under the fake mode)."""
    _, sizes, strides, offset, dtype, device = meta
    extent = 1 + sum((s - 1) * st for s, st in zip(sizes, strides) if s > 0)
    if math.prod(sizes) == 0:
        extent = 0
    storage = torch.empty(offset + extent, dtype=dtype, device=device)
    return storage.as_strided(sizes, strides, offset)


_cache: dict[Any, Propagated] = {}


def propagate(
    key: Any,
    run: Callable[..., Any],
    args: Any,
    kwargs: Any,
    inputs: Sequence[Meta | torch.Tensor],
    place: Callable[[Any, list[torch.Tensor]], tuple[Any, Any]],
) -> Propagated:
    """What ``run`` returns for inputs of this shape, from the cache or by running it on fakes.

    ``inputs`` are the metadata of the handles among the arguments (or local
    tensors, as they are), in the order ``place(args_and_kwargs, fakes)`` puts
    their fakes back into ``(args, kwargs)``.
    """
    found = _cache.get(key)
    if found is not None:
        return found
    found = _run_on_fakes(run, args, kwargs, inputs, place)
    if len(_cache) >= CACHE_LIMIT:
        _cache.clear()
    _cache[key] = found
    return found


def _run_on_fakes(
    run: Callable[..., Any],
    args: Any,
    kwargs: Any,
    inputs: Sequence[Meta | torch.Tensor],
    place: Callable[[Any, list[torch.Tensor]], tuple[Any, Any]],
) -> Propagated:
    mode = _Fakes.get()
    with _disable_current_modes(), mode:
        fakes = [
            mode.from_tensor(item) if isinstance(item, torch.Tensor) else _fake_of(item)
            for item in inputs
        ]
        versions = [fake._version for fake in fakes]
        fake_args, fake_kwargs = place((args, kwargs), fakes)
        try:
            result = run(*fake_args, **fake_kwargs)
        except (DataDependentOutputException, DynamicOutputShapeException) as exc:
            raise RuntimeError(
                f"{_name(run)} needs the values of tensors on the mesh to know its result "
                f"({type(exc).__name__}); fetch them with danaus.inspect, or compute it in a "
                "danaus.remote function with an explicit propagate="
            ) from None
    mutated = tuple(i for i, fake in enumerate(fakes) if fake._version > versions[i])
    if isinstance(result, torch.Tensor):
        return Propagated((_output(result, fakes),), None, (OUT,), mutated)
    leaves, spec = pytree.tree_flatten(result)
    outputs = tuple(_output(leaf, fakes) for leaf in leaves if isinstance(leaf, torch.Tensor))
    marked = tuple(OUT if isinstance(leaf, torch.Tensor) else leaf for leaf in leaves)
    return Propagated(outputs, spec, marked, mutated)


def _output(fake: torch.Tensor, inputs: list[torch.Tensor]) -> Output:
    same = next((i for i, item in enumerate(inputs) if item is fake), -1)
    view_of = -1
    if same < 0:
        storage = fake.untyped_storage()._cdata
        view_of = next(
            (i for i, item in enumerate(inputs) if item.untyped_storage()._cdata == storage), -1
        )
    return Output(same, meta_of(fake), view_of)


def _name(run: Callable[..., Any]) -> str:
    return (
        str(run) if isinstance(run, torch._ops.OpOverload) else getattr(run, "__name__", repr(run))
    )
