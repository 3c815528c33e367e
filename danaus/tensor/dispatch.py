"""An operation on handles, recorded: the controller's side of every aten operator.

``dispatch`` runs once per operator call (``t + 1`` is one call), so it is
written for speed: one pass over the arguments finds the handles (replaced by
their ids, their places noted), the local tensors (sent by value) and the key
under which the result's metadata is cached (`danaus.tensor.propagate`). It
checks that the handles share a mesh and the active stream and may be read
(and written, when the operator writes them), makes handles for the outputs,
and records one `CALL` command.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch.utils import _pytree as pytree

from danaus.core.actor_mesh import placement_of
from danaus.tensor import commands, stream
from danaus.tensor.active import Activation, owned
from danaus.tensor.active import current as current_activation
from danaus.tensor.errors import TensorUsageError
from danaus.tensor.handle import Storage, Tensor
from danaus.tensor.process_group import MetaGroup, RemoteProcessGroup
from danaus.tensor.propagate import OUT, Propagated, meta_of, propagate

if TYPE_CHECKING:
    from danaus.core.mesh import ProcMesh
    from danaus.tensor.engine import Engine

_TO_THE_MESH = frozenset(("aten::lift_fresh", "aten::lift"))
"""Operators of local tensors that make a tensor for the mesh (``torch.tensor([...])``)."""


def stays_local(func: Any, args: tuple[Any, ...], kwargs: Any) -> bool:
    """Whether an operation with an active mesh still runs in the controller (see `_MeshMode`).

    Those with local tensors only (a value fetched with `inspect`, say) do, but for
    ``torch.tensor(data)``, which makes a tensor for the mesh; so do the profiler's.
    With no tensor at all (``torch.rand(3)``), or with a handle, they go to the mesh.
    """
    if func.namespace == "profiler":
        return True
    local = False
    for value in (*args, *kwargs.values()) if kwargs else args:
        kind = type(value)
        if kind is Tensor:
            return False
        if kind is list or kind is tuple:
            for item in value:
                if type(item) is Tensor:
                    return False
                local = local or isinstance(item, torch.Tensor)
        else:
            local = local or isinstance(value, torch.Tensor)
    return local and func._schema.name not in _TO_THE_MESH


class Scanned:
    """A call's arguments, as a command carries them and as the cache keys them."""

    __slots__ = ("args", "groups", "items", "key", "kwargs", "refs")

    def __init__(self) -> None:
        self.items: list[Any] = []
        """The tensors among the arguments (handles, and local tensors), in order."""
        self.refs: list[Any] = []
        """Where the handles sit (`danaus.tensor.commands.RefPath`)."""
        self.groups: list[Any] = []
        """Where the process groups sit (remote functions' arguments)."""
        self.key: list[Any] = []
        self.args: Any = ()
        self.kwargs: dict[str, Any] | None = None

    def _one(self, value: Any, path: Any) -> tuple[Any, Any]:
        """(``value`` as sent, ``value`` as keyed)."""
        kind = type(value)
        if kind is Tensor:
            ident = value._id
            if ident is None:
                raise TensorUsageError(f"{value!r} was dropped and cannot be used")
            self.items.append(value)
            self.refs.append(path)
            return ident, value._meta
        if isinstance(value, torch.Tensor):
            self.items.append(value)
            return value, ("local", *meta_of(value))
        if kind is RemoteProcessGroup:
            self.groups.append(path)
            return value.group_id, ("group", value.group_id)
        return value, value

    def _many(self, values: Any, path: Any) -> tuple[Any, Any]:
        sent = []
        keyed = []
        for index, item in enumerate(values):
            if isinstance(item, (torch.Tensor, RemoteProcessGroup)):
                s, k = self._one(item, (*path, index) if type(path) is tuple else (path, index))
            else:
                s, k = item, item
            sent.append(s)
            keyed.append(k)
        return (list(sent) if type(values) is list else tuple(sent)), tuple(keyed)

    def scan(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Scanned:
        sent = list(args)
        key = self.key
        for index, value in enumerate(args):
            kind = type(value)
            if kind is list or kind is tuple:
                sent[index], keyed = self._many(value, index)
            else:
                sent[index], keyed = self._one(value, index)
            key.append(keyed)
        self.args = tuple(sent)
        if kwargs:
            named = {}
            for name, value in kwargs.items():
                kind = type(value)
                if kind is list or kind is tuple:
                    named[name], keyed = self._many(value, (name,))
                else:
                    named[name], keyed = self._one(value, (name,))
                key.append((name, keyed))
            self.kwargs = named
        return self

    def place(self, call: tuple[Any, Any], metas: list[Any]) -> tuple[Any, Any]:
        """``call`` (the original args and kwargs) with each tensor replaced by its meta tensor."""
        queue = iter(metas)

        def swap(value: Any) -> Any:
            if isinstance(value, torch.Tensor):
                return next(queue)
            if type(value) is RemoteProcessGroup:
                return MetaGroup(value.size())
            return value

        args, kwargs = call
        placed_args = tuple(
            type(a)(swap(x) for x in a) if type(a) in (list, tuple) else swap(a) for a in args
        )
        placed_kwargs = {
            name: type(v)(swap(x) for x in v) if type(v) in (list, tuple) else swap(v)
            for name, v in kwargs.items()
        }
        return placed_args, placed_kwargs


def dispatch(
    func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], activation: Activation | None = None
) -> Any:
    """Record ``func(*args, **kwargs)`` for the mesh of its handles (or the active mesh)."""
    scanned = Scanned().scan(args, kwargs)
    mesh, engine, on = _where(func, scanned, activation)
    key = (func, tuple(scanned.key))
    inputs = [item._meta if type(item) is Tensor else item for item in scanned.items]
    try:
        found = propagate(key, func, args, kwargs, inputs, scanned.place)
    except TypeError as exc:
        if "unhashable" not in str(exc):
            raise
        found = propagate(None, func, args, kwargs, inputs, scanned.place)
    written = _check_writes(func, scanned, found)
    fn_id = engine.function_id(func)
    return _record(
        engine,
        mesh,
        on,
        found,
        scanned,
        written,
        lambda outs: (
            commands.CALL,
            fn_id,
            scanned.args,
            scanned.kwargs,
            tuple(scanned.refs),
            outs,
            written,
        ),
    )


def _where(
    func: Any, scanned: Scanned, activation: Activation | None
) -> tuple[ProcMesh, Engine, stream.Stream]:
    """The mesh and engine an operation goes to, and its stream; checked."""
    on = stream.get_active_stream()
    handles = [item for item in scanned.items if type(item) is Tensor]
    if not handles:
        activation = activation or owned(current_activation())
        if activation is None:
            raise RuntimeError(
                f"{func} on a danaus mesh needs an active mesh: `with mesh.activate():`"
            )
        return activation.mesh, activation.engine, on
    first = handles[0]
    mesh, engine = first._mesh, first._engine
    for handle in handles:
        if handle._engine is not engine or (
            handle._mesh is not mesh
            and placement_of(handle._mesh).shape != placement_of(mesh).shape
        ):
            raise TensorUsageError(
                f"{func}: its tensors are on different meshes ({mesh!r} and {handle._mesh!r}); "
                "move one with to_mesh"
            )
        if handle._stream is not on:
            raise TensorUsageError(
                f"{func}: {handle!r} is on {handle._stream}, but {on} is active; "
                "use `with stream.activate():`, or borrow the tensor to this stream"
            )
        if "r" not in handle._storage.access:
            raise TensorUsageError(
                f"{func}: {handle!r} is lent mutably to another stream; drop the borrow first"
            )
    return mesh, engine, on


def _check_writes(func: Any, scanned: Scanned, found: Propagated) -> tuple[int, ...]:
    """The ids of the handles the operation writes; each must be writable here."""
    if not found.mutated:
        return ()
    written = []
    for index in found.mutated:
        item = scanned.items[index]
        if type(item) is not Tensor:
            continue
        if "w" not in item._storage.access:
            raise TensorUsageError(
                f"{func}: it would write to {item!r}, which is lent to another stream; "
                "drop the borrow first"
            )
        written.append(item._id)
    return tuple(written)


def _record(
    engine: Engine,
    mesh: ProcMesh,
    on: stream.Stream,
    found: Propagated,
    scanned: Any,
    written: tuple[int, ...],
    command: Any,
) -> Any:
    """Make the output handles, record the command (``command(outs)``), return the result."""
    outputs = []
    ids: list[int | None] = []
    items = scanned.items
    for output in found.outputs:
        if output.same >= 0 and type(items[output.same]) is Tensor:
            outputs.append(items[output.same])
            ids.append(None)
            continue
        source = items[output.view_of] if output.view_of >= 0 else None
        storage = source._storage if type(source) is Tensor else Storage()
        handle = engine.handle(mesh, on, output.meta, storage)
        outputs.append(handle)
        ids.append(handle._id)
    if found.spec is None and ids[0] is not None:
        outs: Any = ids[0]
    else:
        outs = tuple(ids)
    engine.record(mesh, on, command(outs), traced=True)
    if found.spec is None:
        return outputs[0]
    queue = iter(outputs)
    leaves = [next(queue) if leaf is OUT else leaf for leaf in found.leaves]
    return pytree.tree_unflatten(leaves, found.spec)
