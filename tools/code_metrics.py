"""Figures of the package's shape, printed as one JSON line: what a structural review counts.

    python tools/code_metrics.py [--root danaus]

- ``largest_classes``: the five longest classes, with their lines and methods;
- ``private_reads_across_modules``: reads of another object's private attribute
  (``x._name`` where ``x`` is not ``self`` or ``cls``) whose name the reading module does
  not define itself, by module;
- ``core_import_cycles``: groups of modules of ``core/`` that import each other, directly or
  through others, counting imports inside functions as well as at the top (but not those made
  for type checking only);
- ``comments``: lines with a comment per thousand lines, and how many comments only draw a
  line (``# ----``);
- ``option_lines``: for each job option of the tcp transport, the lines of the package that
  name it, and in how many files.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import tokenize
from collections import Counter
from pathlib import Path

OPTIONS = (
    "wait_spin_us",
    "heartbeat_interval",
    "heartbeat_timeout",
    "max_message_bytes",
    "frame_bytes",
    "handshake_timeout",
    "max_pending_handshakes",
    "max_procs_per_host",
    "encrypt",
    "home_cpus",
    "preload",
    "cast_fanout",
)


def _modules(root: Path) -> dict[str, Path]:
    package = root.name
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    assert package in found
    return found


def largest_classes(trees: dict[str, ast.Module]) -> list[dict[str, object]]:
    classes = []
    for module, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                methods = [
                    n for n in node.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
                ]
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                classes.append(
                    {"class": f"{module}.{node.name}", "lines": lines, "methods": len(methods)}
                )
    return sorted(classes, key=lambda c: -int(c["lines"]))[:5]  # type: ignore[call-overload]


def private_reads(trees: dict[str, ast.Module]) -> dict[str, int]:
    reads: Counter[str] = Counter()
    for module, tree in trees.items():
        own = {
            n.attr
            for n in ast.walk(tree)
            if isinstance(n, ast.Attribute)
            and isinstance(n.value, ast.Name)
            and n.value.id in ("self", "cls")
        }
        own |= {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.ClassDef)}
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
                and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
                and node.attr not in own
            ):
                reads[module] += 1
    return dict(reads.most_common())


def _runtime_nodes(tree: ast.Module) -> list[ast.AST]:
    """Every node of ``tree`` except those under ``if TYPE_CHECKING:`` (imported for types
    only, never run)."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(inner) for part in node.body for inner in ast.walk(part))
    return [node for node in ast.walk(tree) if id(node) not in skipped]


def _imports(module: str, tree: ast.Module, known: set[str]) -> set[str]:
    found = set()
    for node in _runtime_nodes(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        found.update(name for name in names if name in known and name != module)
    return found


def core_cycles(trees: dict[str, ast.Module], package: str) -> list[list[str]]:
    """The groups of ``core`` modules that import each other, directly or not (strongly
    connected components of more than one module), imports in functions included."""
    core = {name for name in trees if name.startswith(f"{package}.core.")}
    graph = {name: sorted(_imports(name, trees[name], core)) for name in core}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph[node]:
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return groups


def comments(paths: list[Path]) -> dict[str, float]:
    """Lines with a comment (alone on its line or after code), per thousand lines."""
    total = commented = dividers = 0
    for path in paths:
        source = path.read_text()
        total += len(source.splitlines())
        with path.open("rb") as stream:
            for token in tokenize.tokenize(stream.readline):
                if token.type == tokenize.COMMENT:
                    commented += 1
                    dividers += bool(re.fullmatch(r"#\s*-{3,}.*", token.string))
    return {
        "lines": total,
        "comment_lines": commented,
        "comment_lines_per_1000": round(1000 * commented / total, 1),
        "divider_lines": dividers,
    }


def option_lines(paths: list[Path], root: Path) -> dict[str, dict[str, int]]:
    found = {}
    for option in OPTIONS:
        pattern = re.compile(rf"\b{option}\b")
        lines = files = 0
        for path in paths:
            hits = sum(1 for line in path.read_text().splitlines() if pattern.search(line))
            lines += hits
            files += bool(hits)
        found[option] = {"lines": lines, "files": files}
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default="danaus", help="the package's folder (default danaus)")
    root = Path(parser.parse_args().root).resolve()
    modules = _modules(root)
    trees = {name: ast.parse(path.read_text()) for name, path in modules.items()}
    paths = list(modules.values())
    print(
        json.dumps(
            {
                "largest_classes": largest_classes(trees),
                "private_reads_across_modules": private_reads(trees),
                "private_reads_total": sum(private_reads(trees).values()),
                "core_import_cycles": core_cycles(trees, root.name),
                "comments": comments(paths),
                "option_lines": option_lines(paths, root),
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
