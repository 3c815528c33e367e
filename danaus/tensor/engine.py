"""The controller's side of the tensor engine of one proc mesh: handle ids, and the command stream.

Each proc mesh a controller activates gets one `Engine` (slices and renamings
of the mesh share it) and one `TensorWorker` on each of its procs. Commands
are recorded in order into a pending batch, which leaves in one message for
the procs of the slice it is for: when the loop next runs (so that commands
issued back to back travel together), when it grows long, before a command
for another slice, and at once when the controller waits for a value.
Handles that the controller drops are freed with the next batch. A command
for procs one of which has failed raises `SupervisionError` where it is
recorded, as a call to an actor of theirs would; slices of the mesh without
the failed proc go on.
"""

from __future__ import annotations

import itertools
import linecache
import logging
import os
import sys
import threading
import weakref
from collections import OrderedDict, deque
from collections.abc import Sequence
from types import CodeType
from typing import TYPE_CHECKING, Any

import torch

from danaus.core.actor_mesh import placement_of
from danaus.core.errors import SupervisionError
from danaus.core.mesh import ProcMesh
from danaus.core.shape import Shape, Slice
from danaus.tensor import commands
from danaus.tensor.delivery import Delivery, Workers
from danaus.tensor.functions import definition
from danaus.tensor.handle import Storage, Tensor, make
from danaus.tensor.propagate import Meta
from danaus.tensor.stream import DEFAULT, Stream

if TYPE_CHECKING:
    from danaus.core.actor_mesh import ActorMesh
    from danaus.core.runtime import Runtime
    from danaus.tensor.worker import TensorWorker

log = logging.getLogger("danaus.tensor")

BATCH_LIMIT = 2048
"""Commands in a batch before it leaves without waiting for the loop."""

SITES_KEPT = 16384
"""Where the most recent commands were issued, kept to name it when one of them fails."""
SITE_FRAMES = 1
"""Frames of the user's code kept per command (innermost first): walking the stack makes
frame objects, a microsecond or two each."""

_LIBRARIES = (os.path.dirname(os.path.dirname(__file__)), os.path.dirname(torch.__file__))
"""Frames in these (Danaus's own, torch's) are not the user's."""

Key = tuple[int, int]
"""A command's place: its batch's number, and its index in the batch."""


Site = tuple[tuple[CodeType, int], ...]
"""Where a command was issued: the user's innermost frames, as (code, line)."""


def _user_frames() -> Site:
    """The innermost frames of the code that called into torch or Danaus."""
    frame = sys._getframe(2)
    found = []
    while frame is not None:
        code = frame.f_code
        if not code.co_filename.startswith(_LIBRARIES):
            found.append((code, frame.f_lineno))
            if len(found) == SITE_FRAMES:
                break
        frame = frame.f_back
    return tuple(found)


def _format(frames: Site) -> str:
    lines = []
    for code, lineno in reversed(frames):
        lines.append(f'  File "{code.co_filename}", line {lineno}, in {code.co_name}\n')
        source = linecache.getline(code.co_filename, lineno).strip()
        if source:
            lines.append(f"    {source}\n")
    return "".join(lines)


_engines: weakref.WeakKeyDictionary[Runtime, dict[str, Engine]] = weakref.WeakKeyDictionary()
"""Each runtime's engines, by proc mesh id: a runtime's state, kept beside it."""


def engine_of(mesh: ProcMesh) -> Engine:
    """The engine of ``mesh``'s proc mesh, for the calling code's runtime (made on first use)."""
    from danaus.core.context import context

    runtime = context().actor_instance.runtime
    engines = _engines.setdefault(runtime, {})
    mesh_id = placement_of(mesh).mesh_id
    engine = engines.get(mesh_id)
    if engine is None:
        whole = _whole(mesh)
        engine = Engine(runtime, whole, Workers(whole, runtime.world.seed))
        engines[mesh_id] = engine
    return engine


def register(runtime: Runtime, engine: Engine) -> None:
    """Make ``engine`` the one of its mesh for ``runtime`` (a simulated mesh's)."""
    _engines.setdefault(runtime, {})[placement_of(engine.whole).mesh_id] = engine


def _whole(mesh: ProcMesh) -> ProcMesh:
    """The proc mesh that ``mesh`` is a slice of, as its owner spawned it (or flat)."""
    at = placement_of(mesh)
    if at.owned is not None and isinstance(at.owned.mesh, ProcMesh):
        return at.owned.mesh
    flat = Shape(["procs"], Slice(0, [len(at.procs)], [1]))
    return ProcMesh(at.mesh_id, at.procs, flat, mesh.host_mesh)


class Engine:
    """The command stream from this controller to the tensor workers of one proc mesh."""

    def __init__(self, runtime: Runtime, whole: ProcMesh, delivery: Delivery) -> None:
        self.runtime = runtime
        self.whole = whole
        self.delivery = delivery
        self._ids = itertools.count(1)
        self._events = itertools.count(1)
        self._lock = threading.Lock()
        self._target: Shape | None = None
        self._segments: list[tuple[int, list[tuple[Any, ...]]]] = []
        self._count = 0
        self._batches = itertools.count()
        self._batch = next(self._batches)
        self._sites: OrderedDict[Key, Site] = OrderedDict()
        self._scheduled = False
        self._drops: deque[tuple[Shape, int, int]] = deque()
        self._functions: dict[Any, int] = {}
        self._streams: dict[Stream, int] = {DEFAULT: 0}
        self._groups: dict[tuple[Any, ...], int] = {}
        self.closed = False

    @property
    def workers(self) -> ActorMesh[TensorWorker]:
        """The tensor workers of the mesh (another mesh's workers name them to send to)."""
        return self.delivery.workers

    def new_event(self) -> int:
        return next(self._events)

    def handle(self, mesh: ProcMesh, stream: Stream, meta: Meta, storage: Storage) -> Tensor:
        """A handle for a tensor about to be defined by a command (its id is new)."""
        return make(self, mesh, stream, next(self._ids), meta, storage)

    def alias(self, tensor: Tensor, stream: Stream, ready: int) -> Tensor:
        """``tensor``'s shards as seen from ``stream``, once ``tensor``'s stream reaches here."""
        lent = self.handle(tensor._mesh, stream, tensor._meta, Storage())
        self.record(tensor._mesh, tensor._stream, (commands.SIGNAL, ready))
        self.record(tensor._mesh, stream, (commands.WAIT, ready))
        self.record(tensor._mesh, stream, (commands.ALIAS, lent._id, tensor._id))
        return lent

    def drop(self, mesh: ProcMesh, stream: Stream, ident: int) -> None:
        """Free handle ``ident`` with the next batch. Safe from any thread and from ``__del__``."""
        if self.closed:
            return
        self._drops.append((placement_of(mesh).shape, self.stream_id(stream), ident))
        if not self._scheduled:
            self._schedule()

    def streams(self) -> dict[Stream, int]:
        """The streams used so far on this mesh, and their ids."""
        return dict(self._streams)

    def stream_id(self, stream: Stream) -> int:
        found = self._streams.get(stream)
        if found is None:
            found = self._streams[stream] = len(self._streams)
        return found

    def function_id(self, fn: Any, key: Any = None) -> int:
        """The id of ``fn`` (an operator, a function, a ``"module.name"``) on the workers,
        defined there the first time it is used (under ``key``, by default ``fn`` itself)."""
        key = fn if key is None else key
        found = self._functions.get(key)
        if found is None:
            found = len(self._functions)
            self._setup((commands.DEFINE, found, *definition(fn)))
            self._functions[key] = found
        return found

    def group_id(self, mesh: ProcMesh, dims: Sequence[str]) -> int:
        """The id of the groups of procs of ``mesh`` that differ only along ``dims``."""
        shape = placement_of(mesh).shape
        key = (shape.ndslice, tuple(shape.labels), tuple(dims))
        found = self._groups.get(key)
        if found is None:
            found = len(self._groups)
            others = {d: 0 for d in shape.labels if d not in dims}
            members = []
            for index in range(len(shape)):
                point = shape.point(index)
                if any(point[d] != 0 for d in dims):
                    continue
                fixed = {d: point[d] for d in others}
                members.append(
                    tuple(shape.slice(**fixed).ranks()) if fixed else tuple(shape.ranks())
                )
            self._setup((commands.GROUPS, found, tuple(members)))
            self._groups[key] = found
        return found

    def _setup(self, command: tuple[Any, ...]) -> None:
        """Send a definition to every live worker now (ahead of the batches that use it)."""
        with self._lock:
            self.delivery.setup(command)

    def record(
        self, mesh: ProcMesh, stream: Stream, command: tuple[Any, ...], traced: bool = False
    ) -> None:
        """Add ``command`` for the procs of ``mesh``, on ``stream``, to the pending batch.

        ``traced``: note where the user's code issued it, to show if it fails.
        """
        sid = self._streams.get(stream)
        if sid is None:
            sid = self.stream_id(stream)
        shape = placement_of(mesh).shape
        with self._lock:
            if shape is not self._target:
                if self._segments and shape != self._target:
                    self._flush_locked()
                self._target = shape
            if not self._segments:
                # A batch for procs one of which has failed would be lost: say so now.
                self.delivery.check(shape)
            if self._drops:
                self._take_drops()
            segments = self._segments
            if segments and segments[-1][0] == sid:
                segments[-1][1].append(command)
            else:
                segments.append((sid, [command]))
            if traced:
                self._remember((self._batch, self._count), _user_frames())
            self._count += 1
            if self._count >= BATCH_LIMIT:
                self._flush_locked()
            elif not self._scheduled:
                self._schedule()

    def send_to_one(self, rank: int, stream: Stream, command: tuple[Any, ...]) -> None:
        """Send ``command`` now to the proc of root rank ``rank`` alone, after what is pending
        (a fetch: the other procs have nothing to do with it)."""
        sid = self.stream_id(stream)
        with self._lock:
            self._flush_locked()
            self._remember((self._batch, 0), _user_frames())
            self._send(Shape((), Slice(rank, (), ())), [(sid, [command])])

    def flush(self) -> None:
        """Send the pending batch (and pending drops) now."""
        with self._lock:
            self._scheduled = False
            self._flush_locked()

    def _flush_soon(self) -> None:
        """The flush the loop runs: a batch for procs that failed meanwhile is dropped (the
        next command for them raises, as recording checks them)."""
        try:
            self.flush()
        except SupervisionError as exc:
            log.info("a batch of tensor commands was not sent: %s", exc)

    def _schedule(self) -> None:
        self._scheduled = True
        loop = self.runtime.loop
        try:
            if loop.is_running():
                loop.call_soon_threadsafe(self._flush_soon)
            else:
                loop.call_soon(self._flush_soon)
        except RuntimeError:  # the loop has closed: the world is gone, and the mesh with it
            self.closed = True

    def _take_drops(self) -> None:
        """Put the handles dropped so far into the pending batch when they are on its procs,
        else send them to theirs now (under the lock). Every command that used them is
        already recorded: a handle is dropped once nothing holds it."""
        segments, target, drops = self._segments, self._target, self._drops
        elsewhere: dict[Shape, dict[int, list[int]]] | None = None
        while drops:
            shape, sid, ident = drops.popleft()
            if shape is target or shape == target:
                last = segments[-1] if segments else None
                if last is None or last[0] != sid or last[1][-1][0] != commands.DELETE:
                    segments.append((sid, [(commands.DELETE, [])]))
                    self._count += 1
                segments[-1][1][-1][1].append(ident)
            else:
                if elsewhere is None:
                    elsewhere = {}
                elsewhere.setdefault(shape, {}).setdefault(sid, []).append(ident)
        for shape, by_stream in (elsewhere or {}).items():
            self.delivery.send_to_live(
                shape,
                next(self._batches),
                [(sid, [(commands.DELETE, ids)]) for sid, ids in by_stream.items()],
            )

    def _flush_locked(self) -> None:
        if self._drops:
            self._take_drops()
        segments, self._segments = self._segments, []
        if segments and self._target is not None:
            self._send(self._target, segments)

    def _send(self, shape: Shape, segments: list[tuple[int, list[tuple[Any, ...]]]]) -> None:
        """Send a batch (the pending one, or one of its own), under the next batch number."""
        batch = self._batch
        self._batch = next(self._batches)
        self._count = 0
        if not self.closed:
            self.delivery.send(shape, batch, segments)

    def _remember(self, key: Key, frames: Site) -> None:
        sites = self._sites
        if len(sites) >= SITES_KEPT:
            sites.popitem(last=False)  # the oldest
        sites[key] = frames

    def issued(self, key: Key | None) -> str:
        """Where the user's code issued the command at ``key``, as a traceback ("" if unknown)."""
        frames = self._sites.get(key) if key is not None else None
        return _format(frames) if frames else ""

    def close(self) -> None:
        """No more commands (the mesh stopped)."""
        self.closed = True
