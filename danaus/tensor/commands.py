"""The tensor engine's commands: what the controller records and every tensor worker runs.

A command is a tuple whose first item says its kind; the rest are plain values
(ints, tuples, dtypes, small local tensors), so that a batch of a thousand
pickles with the standard pickler in one call. A tensor handle travels as its
id (an int) and the command says where in its arguments those ids sit
(`RefPath`), rather than wrapping each one in an object the pickler would
have to look up.

A batch is a tuple of segments ``(stream id, commands)``: each stream runs its
commands in the order they were recorded, and the streams of one proc run side by side.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

RefPath = int | tuple[Any, ...]
"""Where a handle id sits in a command's arguments: an index into the positional
arguments, ``(index, inner index)`` inside a list argument, or ``(name,)`` / ``(name,
inner index)`` for a keyword argument."""

CALL = 0
"""``(CALL, fn_id, args, kwargs, refs, outs, mutated)``: ``fn(*args, **kwargs)`` with the
handles at ``refs`` resolved; its tensors (flattened) become the handles in ``outs`` (an
int for one tensor, else a tuple whose ``None`` entries are inputs returned as they are);
``mutated`` are the ids of arguments it writes."""
DEFINE = 1
"""``(DEFINE, fn_id, what, payload)``: bind ``fn_id`` to an aten operator (``what`` "op",
``payload`` its name) or to a function (``what`` "path" or "pickled"). A definition is not
part of a batch: the worker's actor takes it (``TensorWorker.setup``)."""
DELETE = 2
"""``(DELETE, ids)``: forget these handles on this stream."""
FETCH = 3
"""``(FETCH, rank, ids, port)``: on root rank ``rank`` only, send the values of the handles
``ids`` (a list) to ``port``."""
REMOTE = 4
"""``(REMOTE, fn_id, args, kwargs, refs, outs, mutated, answer, groups)``: a user function;
``outs`` is a tuple of ids for the tensors of its result, flattened. With ``answer`` (a port
and the root ranks that answer, in order), the result is also sent there. ``groups`` are the
paths of group ids, which the proc replaces with its process group of that group."""
REDUCE = 5
"""``(REDUCE, group_id, src, out, reduction, scatter)``: a collective over the procs of a
group (``out`` None: in place)."""
GROUPS = 6
"""``(GROUPS, group_id, members)``: ``members`` is a tuple of tuples of root ranks, one per
group; each proc belongs to one of them. A definition, as `DEFINE`."""
SEND = 7
"""``(SEND, transfer, src, sends, peers)``: offer the shard of ``src`` to the root ranks
``sends[my rank]`` of the worker mesh ``peers``."""
RECV = 8
"""``(RECV, transfer, out, sources, shape, dtype, peers)``: receive handle ``out`` from root
rank ``sources[my rank]`` of the worker mesh ``peers``."""
SIGNAL = 9
"""``(SIGNAL, event)``: this stream has reached this point."""
WAIT = 10
"""``(WAIT, event)``: go on once another stream has signalled ``event``."""
ALIAS = 11
"""``(ALIAS, new, old)``: handle ``new`` is the shard of ``old`` (a borrow on another stream)."""


def resolve(
    args: tuple[Any, ...],
    kwargs: dict[str, Any] | None,
    refs: tuple[RefPath, ...],
    lookup: Callable[[int], Any],
) -> tuple[list[Any], dict[str, Any]]:
    """``args`` and ``kwargs`` with the handle ids at ``refs`` replaced by ``lookup(id)``."""
    resolved = list(args)
    named = dict(kwargs) if kwargs else {}
    for path in refs:
        if type(path) is int:
            resolved[path] = lookup(resolved[path])
            continue
        head = path[0]
        if type(head) is str:
            if len(path) == 1:
                named[head] = lookup(named[head])
            else:
                inner = list(named[head])
                inner[path[1]] = lookup(inner[path[1]])
                named[head] = inner
        else:
            inner = resolved[head]
            if type(inner) is not list:
                inner = list(inner)
                resolved[head] = inner
            inner[path[1]] = lookup(inner[path[1]])
    return resolved, named
