"""A proc mesh as a table of text: where each of its procs lives (``ProcMesh.to_table()``).

Each cell is ``host:proc``: the proc's host (its index in the mesh's host
mesh) and its index among that host's procs of the mesh. The last dimension
runs along the columns, the one before it down the rows, and each
combination of the dimensions before those gets a table of its own.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

from danaus.core.shape import Shape


def mesh_table(shape: Shape, cell: Callable[[int], str]) -> str:
    """``shape``'s members as tables; ``cell(position)`` is the text of the member at a
    position of the flat member list."""
    labels = list(shape.labels)
    sizes = list(shape.ndslice.sizes)
    if not labels:
        return cell(shape.ndslice.offset)
    columns = labels[-1]
    rows = labels[-2] if len(labels) > 1 else None
    outer = labels[:-2]
    tables = []
    for fixed in itertools.product(*(range(s) for s in sizes[: len(outer)])):
        part = shape.slice(**dict(zip(outer, fixed))) if outer else shape
        row_count = part.extent[rows] if rows else 1
        body = []
        for r in range(row_count):
            line = part.slice(**{rows: r}) if rows else part
            body.append([cell(position) for position in line.ranks()])
        title = ", ".join(f"{d}={v}" for d, v in zip(outer, fixed))
        column_names = [str(c) for c in range(part.extent[columns])]
        row_names = [str(r) for r in range(row_count)] if rows else [""]
        table = _grid([rows or "", columns], body, column_names, row_names)
        tables.append(f"{title}\n{table}" if title else table)
    return "\n\n".join(tables)


def _grid(
    names: Sequence[str], body: list[list[str]], column_names: list[str], row_names: list[str]
) -> str:
    """A grid: the column dimension's name above its indices, the row dimension's (when there
    is one) on their left; a mesh of one dimension names it in the corner instead."""
    rows, columns = names
    width = max(len(text) for text in [*column_names, *(c for line in body for c in line)])
    corner = rows if rows else columns
    left = max(len(corner), *(len(r) for r in row_names))
    lines = [" " * left + " | " + columns] if rows else []
    lines.append(corner.ljust(left) + " | " + " ".join(c.rjust(width) for c in column_names))
    lines.append("-" * left + "-+-" + "-" * (len(lines[-1]) - left - 3))
    for name, line in zip(row_names, body):
        lines.append(name.ljust(left) + " | " + " ".join(c.rjust(width) for c in line))
    return "\n".join(lines)
