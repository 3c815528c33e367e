"""Who waits on whom: the calls in flight as a wait-for graph, and its cycles.

When a program can make no more progress (the simulator finds nothing left to
do), the reason is usually a cycle of actors, each handling a call that waits
for an answer from the next: ``a.f`` calls ``b.g``, which calls ``a.h``, which
is queued behind ``a.f``. `describe_waits` names those cycles, and otherwise
lists who waits on whom.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from danaus.core.instance import Instance
    from danaus.core.runtime import Runtime

Node = tuple[str, str]
"""An actor by where it lives: (proc id, actor key)."""

MAX_LISTED = 10


@dataclass(frozen=True)
class Wait:
    """``waiter`` awaits answers to a call of ``method`` from the actors ``targets``."""

    waiter: Instance
    method: str
    targets: tuple[Node, ...]


def _node(instance: Instance) -> Node:
    return (instance.proc_id, instance.key)


def _label(instance: Instance | None, node: Node) -> str:
    if instance is None:
        return f"actor {node[1]} on proc {node[0]}"
    call = instance.running_call
    doing = f" (handling {call.method})" if call is not None else ""
    return f"{instance.actor_id}{doing}"


def describe_waits(runtimes: Iterable[Runtime]) -> str:
    """The cycles of waiting actors among ``runtimes`` (a deadlock), or else who waits on whom."""
    runtimes = list(runtimes)
    instances = {_node(i): i for r in runtimes for i in r.instances()}
    waits = [w for r in runtimes for w in r.waits()]
    edges: dict[Node, list[Node]] = {}
    for wait in waits:
        if wait.waiter.running_call is not None:
            edges.setdefault(_node(wait.waiter), []).extend(wait.targets)
    cycles = _cycles(edges)
    if cycles:
        lines = ["deadlock: actors wait on each other in a cycle:"]
        for cycle in cycles:
            names = [_label(instances.get(node), node) for node in cycle]
            lines.append("  " + " waits for ".join([*names, names[0]]))
        return "\n".join(lines)
    if not waits:
        return ""
    lines = ["waiting:"]
    for wait in waits[:MAX_LISTED]:
        targets = ", ".join(_label(instances.get(t), t) for t in wait.targets)
        lines.append(f"  {_label(wait.waiter, _node(wait.waiter))} waits for {targets}")
    if len(waits) > MAX_LISTED:
        lines.append(f"  ... and {len(waits) - MAX_LISTED} more")
    return "\n".join(lines)


def _cycles(edges: dict[Node, list[Node]]) -> list[list[Node]]:
    """The elementary cycles through the graph found by depth-first search, each once."""
    found: dict[tuple[Node, ...], list[Node]] = {}
    done: set[Node] = set()

    def visit(node: Node, path: list[Node], on_path: dict[Node, int]) -> None:
        on_path[node] = len(path)
        path.append(node)
        for succ in edges.get(node, ()):
            if succ in on_path:
                cycle = path[on_path[succ] :]
                start = cycle.index(min(cycle))
                canonical = cycle[start:] + cycle[:start]
                found.setdefault(tuple(canonical), canonical)
            elif succ not in done:
                visit(succ, path, on_path)
        path.pop()
        del on_path[node]
        done.add(node)

    for node in sorted(edges):
        if node not in done:
            visit(node, [], {})
    return list(found.values())
