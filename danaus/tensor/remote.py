"""`remote`: a function of the user's, run on every proc of a mesh, on the procs' shards.

``f = danaus.remote(fn)`` (or ``remote("module.fn")``) called inside an active
mesh records one command: every proc runs ``fn`` on its shards and keeps the
tensors it returns as new handles. Their shapes come from ``propagate``, a
function run on meta tensors with the same arguments, or, without one, from
running ``fn`` itself on meta tensors. ``f.call(...)`` instead returns a
`Future` of what each proc's ``fn`` returned (a `ValueMesh`), and
``f.call_one(...)`` that of a mesh of one proc.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from danaus.core.actor_mesh import placement_of
from danaus.core.future import Future, new_future
from danaus.core.ports import FirstHandler, GatherHandler
from danaus.tensor import commands
from danaus.tensor.dispatch import Scanned, _check_writes, _record, _where
from danaus.tensor.functions import resolve
from danaus.tensor.handle import Tensor
from danaus.tensor.propagate import propagate


class Remote:
    """A function to run on the procs of the active mesh (made by `remote`)."""

    def __init__(self, impl: Any, propagator: Any = None) -> None:
        if not (callable(impl) or isinstance(impl, str)):
            raise TypeError(f"remote takes a function or a 'module.name' string, not {impl!r}")
        self._remote_impl = impl
        self._propagator = propagator
        self._local: Callable[..., Any] | None = None
        functools.update_wrapper(self, impl) if callable(impl) else None

    def _propagator_or_self(self) -> Callable[..., Any]:
        if callable(self._propagator):
            return self._propagator
        if self._propagator == "inspect":
            return _nothing
        if self._propagator is not None:
            raise ValueError(
                f"propagate must be a function, 'inspect' or None, not {self._propagator!r}"
            )
        if self._local is None:
            impl = self._remote_impl
            self._local = resolve("path", impl) if isinstance(impl, str) else impl
        return self._local

    def _prepare(
        self, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[Scanned, Any, Any, Any, int]:
        scanned = Scanned().scan(args, kwargs)
        mesh, engine, on = _where(self, scanned, None)
        fn_id = engine.function_id(self._remote_impl, key=self)
        return scanned, mesh, engine, on, fn_id

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        scanned, mesh, engine, on, fn_id = self._prepare(args, kwargs)
        inputs = [item._meta if type(item) is Tensor else item for item in scanned.items]
        key = (self, tuple(scanned.key))
        try:
            found = propagate(key, self._propagator_or_self(), args, kwargs, inputs, scanned.place)
        except TypeError as exc:
            if "unhashable" not in str(exc):
                raise
            found = propagate(None, self._propagator_or_self(), args, kwargs, inputs, scanned.place)
        written = _check_writes(self, scanned, found)
        # A function of the user's returns new tensors on the procs, even where its
        # propagation returns an argument ("like this one").
        found = found._replace(
            outputs=tuple(out._replace(same=-1, view_of=-1) for out in found.outputs)
        )
        return _record(
            engine,
            mesh,
            on,
            found,
            scanned,
            written,
            lambda outs: (
                commands.REMOTE,
                fn_id,
                scanned.args,
                scanned.kwargs,
                tuple(scanned.refs),
                outs if type(outs) is tuple else (outs,),
                written,
                None,
                tuple(scanned.groups),
            ),
        )

    def call(self, *args: Any, **kwargs: Any) -> Future[Any]:
        """Run on every proc of the mesh; a future of what each returned, as a `ValueMesh`."""
        return self._ask(args, kwargs, None, one=False)

    def call_one(self, *args: Any, **kwargs: Any) -> Future[Any]:
        """Run on the one proc of a mesh of one proc; a future of what it returned."""
        return self._ask(args, kwargs, None, one=True)

    def _ask(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], shard: dict[str, int] | None, one: bool
    ) -> Future[Any]:
        """Run on the procs of the mesh (only on the proc at ``shard``, given one) and send
        back what they returned."""
        from danaus.tensor.fetch import root_rank

        scanned, mesh, engine, on, fn_id = self._prepare(args, kwargs)
        procs = placement_of(engine.whole).members()
        shape = placement_of(mesh).shape
        afut, future = new_future(engine.runtime.loop)
        if shard is not None:
            ranks: tuple[int, ...] = (root_rank(shape, shard),)
            handler: Any = FirstHandler([procs[ranks[0]]], afut)
        elif one:
            if len(shape) != 1:
                raise ValueError(f"call_one needs a mesh of one proc; {mesh!r} has {len(shape)}")
            ranks = tuple(shape.ranks())
            handler = FirstHandler([procs[ranks[0]]], afut)
        else:
            ranks = tuple(shape.ranks())
            handler = GatherHandler([procs[r] for r in ranks], shape, afut)
        runtime = engine.runtime
        port = runtime.open_port(handler)
        for proc in handler.procs:
            runtime.watch(proc)
        engine.record(
            mesh,
            on,
            (
                commands.REMOTE,
                fn_id,
                scanned.args,
                scanned.kwargs,
                tuple(scanned.refs),
                (),
                (),
                (port, ranks),
                tuple(scanned.groups),
            ),
        )
        engine.flush()
        return future

    def __repr__(self) -> str:
        return f"<danaus.remote {getattr(self._remote_impl, '__qualname__', self._remote_impl)}>"


def _nothing(*args: Any, **kwargs: Any) -> None:
    return None


def remote(function: Any = None, *, propagate: Any = None) -> Any:
    """Make ``function`` (or a ``"module.name"`` string) a function of the procs of a mesh.

    Usable as a decorator, with or without ``propagate=``; see `Remote`.
    """
    if function is None:
        return functools.partial(remote, propagate=propagate)
    return Remote(function, propagate)


def call_on_shard_and_fetch(
    fn: Remote, *args: Any, shard: dict[str, int] | None = None, **kwargs: Any
) -> Future[Any]:
    """Run ``fn`` on the proc at ``shard`` (0 along dimensions not given) of the mesh of its
    arguments (or the active mesh), and return a future of what it returned."""
    return fn._ask(args, kwargs, shard or {}, one=False)
