"""A stream of one tensor worker: runs its commands in order, and keeps failures from spreading.

Each stream has a runner of the world's (`danaus.core.transport.ActorRunner`):
a thread of its own on real transports, greenlets on the simulator's one
loop. A batch of commands runs there in one go; a command that must wait
(for a peer's part of a collective, a tensor from another mesh, another
stream's event) blocks its stream only, on a Danaus future.

A command that raises leaves a `Failed` in place of each tensor it would
have made or written; a command that reads a `Failed` makes its own outputs
`Failed` too, without running, and names the operation that failed first.
Fetching one sends the error to the controller. The stream goes on.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

import torch
from torch.utils import _pytree as pytree

from danaus.core.ports import Port
from danaus.core.remote_errors import remote_traceback
from danaus.core.transport import ActorRunner
from danaus.tensor import commands
from danaus.tensor.commands import resolve
from danaus.tensor.errors import RemoteTensorError
from danaus.tensor.failed import Failed, Poisoned
from danaus.tensor.fetch import pack

if TYPE_CHECKING:
    from danaus.core.future import Future
    from danaus.tensor.isolation import _Saved
    from danaus.tensor.worker import WorkerState


class Executor:
    """One stream of one worker: its queue of batches, run in order on its runner."""

    def __init__(self, state: WorkerState, sid: int, runner: ActorRunner) -> None:
        self.state = state
        self.sid = sid
        self.table = state.table
        self._runner = runner
        self._lock = threading.Lock()
        self._queue: deque[tuple[tuple[int, int], list[tuple[Any, ...]]]] = deque()
        self._draining = False
        self._closed = False
        self._saved: _Saved | None = None
        by_kind = {
            commands.CALL: self._call,
            commands.DEFINE: self._definition,
            commands.DELETE: self._delete,
            commands.FETCH: self._fetch,
            commands.REMOTE: self._remote,
            commands.REDUCE: self._reduce,
            commands.GROUPS: self._definition,
            commands.SEND: self._send,
            commands.RECV: self._recv,
            commands.SIGNAL: self._signal,
            commands.WAIT: self._wait,
            commands.ALIAS: self._alias,
        }
        # A list indexed by kind: the run loop looks a handler up once per command.
        self._handlers: list[Callable[[tuple[Any, ...]], None]] = [
            by_kind[kind] for kind in range(len(by_kind))
        ]

    def submit(self, place: tuple[int, int], batch: list[tuple[Any, ...]]) -> None:
        """Run ``batch`` after what this stream already has (from the worker's thread).

        ``place`` is the batch's number and the index of the first of these commands in it
        (a failure names it, and the controller knows where it was issued).
        """
        with self._lock:
            if not self._draining and _runs_at_once(batch) and not self.state.transfers.busy:
                self._draining = True
                inline = True
            else:
                self._queue.append((place, batch))
                inline = False
                start = not self._draining
                self._draining = True
        if inline:
            try:
                self._run(place, batch)
            finally:
                with self._lock:
                    start = bool(self._queue)
                    self._draining = start
        if start:
            self._runner.loop.call_soon_threadsafe(self._start)

    def _start(self) -> None:
        self._runner.loop.create_task(self._drain())

    async def _drain(self) -> None:
        while True:
            with self._lock:
                if not self._queue or self._closed:
                    self._draining = False
                    return
                place, batch = self._queue.popleft()
            await self._runner.call_sync(partial(self._run, place, batch))

    def close(self, timeout: float) -> None:
        """Drop the batches not yet started and end the stream's runner.

        On a real transport, wait (at most ``timeout`` seconds) for the batch
        running now: a thread still inside a torch operator when its process
        exits aborts the process (the interpreter ends the thread by unwinding
        through torch's C++ frames).
        """
        with self._lock:
            self._closed = True
            self._queue.clear()
        if self.state.isolated is not None:  # the simulator: the runner is shared, nothing runs
            return
        stopped = threading.Event()
        self._runner.loop.call_soon_threadsafe(stopped.set)
        self._runner.close()
        stopped.wait(timeout)

    def _run(self, place: tuple[int, int], batch: list[tuple[Any, ...]]) -> None:
        isolated = self.state.isolated
        if isolated is not None:
            self._saved = isolated.enter()
        handlers = self._handlers
        try:
            batch_number, first = place
            for index, command in enumerate(batch, first):
                try:
                    handlers[command[0]](command)
                except Exception as exc:
                    self._failed(command, exc, (batch_number, index))
        finally:
            if isolated is not None and self._saved is not None:
                isolated.leave(self._saved)
                self._saved = None

    def wait(self, future: Future[Any]) -> Any:
        """The result of ``future``, blocking this stream only."""
        isolated = self.state.isolated
        if isolated is None or self._saved is None:
            return future.get()
        isolated.leave(self._saved)
        try:
            return future.get()
        finally:
            self._saved = isolated.enter()

    def lookup(self, ident: int) -> Any:
        """The shard of handle ``ident``; `Poisoned` if it failed."""
        value = self.table[ident]
        if type(value) is Failed:
            raise Poisoned(value)
        return value

    def _call(self, command: tuple[Any, ...]) -> None:
        _, fn_id, args, kwargs, refs, outs, mutated = command
        fn = self.state.functions[fn_id]
        if refs:
            args, kwargs = resolve(args, kwargs, refs, self.lookup)
        if mutated and self.state.transfers.busy:
            self.state.transfers.before_write(self, [self.table[i] for i in mutated])
        result = fn(*args, **kwargs) if kwargs else fn(*args)
        if type(outs) is int:
            self.table[outs] = result
        elif outs:
            table = self.table
            for ident, value in zip(outs, _tensors(result)):
                if ident is not None:
                    table[ident] = value

    def _remote(self, command: tuple[Any, ...]) -> None:
        _, fn_id, args, kwargs, refs, outs, mutated, answer, groups = command
        if answer is not None and not outs and self.state.rank not in answer[1]:
            return
        fn = self.state.functions[fn_id]
        if refs:
            args, kwargs = resolve(args, kwargs, refs, self.lookup)
        if mutated and self.state.transfers.busy:
            self.state.transfers.before_write(self, [self.table[i] for i in mutated])
        if groups:
            args, kwargs = resolve(args, kwargs, groups, self._process_group)
        result = fn(*args, **(kwargs or {}))
        if answer is not None:
            port, ranks = answer
            if self.state.rank in ranks:
                Port(port, ranks.index(self.state.rank)).send(_detached(result))
            if not outs:
                return
        tensors = _tensors(result)
        if len(tensors) != len(outs):
            raise TypeError(
                f"{_name(fn)} returned {len(tensors)} tensors where its propagation said "
                f"{len(outs)}"
            )
        for ident, value in zip(outs, tensors):
            if ident is not None:
                self.table[ident] = value.detach()

    def _process_group(self, group_id: int) -> Any:
        return self.state.collectives.process_group(self, group_id)

    def _fetch(self, command: tuple[Any, ...]) -> None:
        _, rank, ids, port = command
        if rank != self.state.rank:
            return
        reply = Port(port, 0)
        values = []
        for ident in ids:
            value = self.table.get(ident)
            if type(value) is Failed:
                reply.exception(value.error)
                return
            if value is None:
                reply.exception(KeyError(f"tensor {ident} is not on rank {self.state.point}"))
                return
            values.append(value)
        reply.send(pack(values))

    def _delete(self, command: tuple[Any, ...]) -> None:
        pop = self.table.pop
        for ident in command[1]:
            pop(ident, None)

    def _alias(self, command: tuple[Any, ...]) -> None:
        _, new, old = command
        self.table[new] = self.table[old]

    def _signal(self, command: tuple[Any, ...]) -> None:
        self.state.events.signal(command[1])

    def _wait(self, command: tuple[Any, ...]) -> None:
        self.wait(self.state.events.wait(command[1]))

    def _reduce(self, command: tuple[Any, ...]) -> None:
        if command[3] is None and self.state.transfers.busy:
            self.state.transfers.before_write(self, [self.table[command[2]]])
        self.state.collectives.reduce(self, command)

    def _send(self, command: tuple[Any, ...]) -> None:
        self.state.transfers.send(self, command)

    def _recv(self, command: tuple[Any, ...]) -> None:
        self.state.transfers.recv(self, command)

    def _definition(self, command: tuple[Any, ...]) -> None:
        raise ValueError(f"command kind {command[0]} is a definition: it does not run on a stream")

    def _failed(self, command: tuple[Any, ...], exc: Exception, key: tuple[int, int]) -> None:
        if isinstance(exc, Poisoned):
            failed = Failed(exc.failed.error.dependent())
        else:
            error = RemoteTensorError(
                dict(self.state.point),
                self._describe(command),
                exc,
                remote_traceback(exc),
                issued_at=key,
            )
            failed = Failed(error)
        for ident in _defined_by(command):
            self.table[ident] = failed
        rank = self.state.rank
        if command[0] == commands.FETCH and command[1] == rank:
            Port(command[3], 0).exception(failed.error)
        elif command[0] == commands.REMOTE and command[7] is not None:
            port, ranks = command[7]
            if rank in ranks:
                Port(port, ranks.index(rank)).exception(failed.error)

    def _describe(self, command: tuple[Any, ...]) -> str:
        kind = command[0]
        if kind in (commands.CALL, commands.REMOTE):
            return _name(self.state.functions.get(command[1], command[1]))
        return _KIND_NAMES.get(kind, f"command {kind}")


_KIND_NAMES = {
    commands.FETCH: "fetch",
    commands.REDUCE: "reduce",
    commands.SEND: "to_mesh (send)",
    commands.RECV: "to_mesh (receive)",
    commands.WAIT: "wait for another stream",
}


INLINE_LIMIT = 64
"""The longest batch a stream's worker may run on its own thread, to save a thread hop."""

_NEVER_WAIT = frozenset(
    (commands.CALL, commands.DELETE, commands.FETCH, commands.ALIAS, commands.SIGNAL)
)


def _runs_at_once(batch: list[tuple[Any, ...]]) -> bool:
    """Whether ``batch`` is short and none of its commands can wait (for a peer, another
    stream, or user code): then the worker's thread may run it itself when the stream is idle."""
    return len(batch) <= INLINE_LIMIT and all(command[0] in _NEVER_WAIT for command in batch)


def _defined_by(command: tuple[Any, ...]) -> list[int]:
    """The handles a command makes or writes, which its failure poisons."""
    kind = command[0]
    if kind in (commands.CALL, commands.REMOTE):
        outs, mutated = command[5], command[6]
        made = [outs] if type(outs) is int else [o for o in outs if o is not None]
        return made + list(mutated)
    if kind == commands.REDUCE:
        return [command[3] if command[3] is not None else command[2]]
    if kind == commands.RECV:
        return [command[2]]
    if kind == commands.ALIAS:
        return [command[1]]
    return []


def _tensors(result: Any) -> list[Any]:
    """The tensors of an operation's result, in the order the controller flattened them."""
    if isinstance(result, torch.Tensor):
        return [result]
    if type(result) in (tuple, list) and all(isinstance(r, torch.Tensor) for r in result):
        return list(result)
    return [leaf for leaf in pytree.tree_leaves(result) if isinstance(leaf, torch.Tensor)]


def _detached(result: Any) -> Any:
    return pytree.tree_map(
        lambda leaf: leaf.detach().clone() if isinstance(leaf, torch.Tensor) else leaf, result
    )


def _name(fn: Any) -> str:
    if isinstance(fn, torch._ops.OpOverload):
        return str(fn)
    return getattr(fn, "__qualname__", None) or repr(fn)
