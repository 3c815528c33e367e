"""The package's shape: core knows no transport, its modules import each other without a
cycle, every module imports on its own, and importing the package changes nothing."""

from __future__ import annotations

import ast
import graphlib
import importlib.util
import json
import os
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import pytest

import danaus
from danaus.core import config

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = Path(danaus.__file__).parent


def imported_modules(path: Path, *, with_typing_only: bool = True) -> set[str]:
    """Every module a source file imports, at any depth (functions too), and those under
    ``if TYPE_CHECKING:`` (imported for type checkers only) unless ``with_typing_only`` is false."""
    tree = ast.parse(path.read_text(), str(path))
    skipped = (
        set()
        if with_typing_only
        else {
            id(inner)
            for node in ast.walk(tree)
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
            for part in node.body
            for inner in ast.walk(part)
        }
    )
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def test_core_imports_nothing_from_the_transports():
    offenders = {
        str(path.relative_to(ROOT)): sorted(m for m in imported_modules(path) if "transports" in m)
        for path in sorted((PACKAGE / "core").rglob("*.py"))
    }
    assert {path: mods for path, mods in offenders.items() if mods} == {}


def test_the_checker_sees_imports_inside_functions(tmp_path):
    source = tmp_path / "m.py"
    source.write_text("def f():\n    from danaus.transports.tcp import world\n")
    assert "danaus.transports.tcp" in imported_modules(source)


def import_graph(folder: Path, package: str) -> dict[str, set[str]]:
    """For each module of ``folder`` (the package ``package``), the modules of the same
    folder it imports when it runs."""
    modules = {f"{package}.{path.stem}": path for path in folder.glob("*.py")}
    modules.pop(f"{package}.__init__", None)
    return {
        name: {
            other
            for other in imported_modules(path, with_typing_only=False)
            if other in modules and other != name
        }
        for name, path in modules.items()
    }


def import_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """Modules that import each other round in a circle (None: there is no such circle)."""
    try:
        tuple(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as error:
        return list(error.args[1])
    return None


def test_core_has_no_import_cycle():
    """Each module of core can be read knowing only those it imports: no two modules of
    core import each other, directly or through others, even from inside a function."""
    graph = import_graph(PACKAGE / "core", "danaus.core")
    assert "danaus.core.instance" in graph["danaus.core.runtime"]  # the graph is read
    assert import_cycle(graph) is None


def test_the_cycle_checker_sees_imports_inside_functions_but_not_for_types(tmp_path):
    (tmp_path / "a.py").write_text("from pkg import b\n")
    (tmp_path / "b.py").write_text("def f():\n    from pkg.a import g\n")
    (tmp_path / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import a\n"
    )
    graph = import_graph(tmp_path, "pkg")
    assert graph == {"pkg.a": {"pkg.b"}, "pkg.b": {"pkg.a"}, "pkg.c": set()}
    assert sorted(set(import_cycle(graph) or ())) == ["pkg.a", "pkg.b"]
    assert import_cycle({**graph, "pkg.b": set()}) is None


def documented_layers() -> list[set[str]]:
    """The modules of each layer of core, from the table of ``docs/architecture.md``."""
    page = (ROOT / "docs" / "architecture.md").read_text()
    rows = re.findall(r"^\| \d+\. [^|]+\| ([^|]+) \|", page, re.MULTILINE)
    return [set(re.findall(r"`(\w+)`", row)) for row in rows]


def test_each_module_of_core_imports_only_from_its_layer_or_those_below_as_documented():
    layers = documented_layers()
    assert len(layers) == 5
    layer_of = {
        f"danaus.core.{name}": number for number, names in enumerate(layers) for name in names
    }
    assert sum(map(len, layers)) == len(layer_of), "a module is in two layers"
    graph = import_graph(PACKAGE / "core", "danaus.core")
    assert set(layer_of) == set(graph), "the table lists other modules than core has"
    upward = sorted(
        f"{module} imports {other}"
        for module, others in graph.items()
        for other in others
        if layer_of[other] > layer_of[module]
    )
    assert upward == []


def all_modules() -> list[str]:
    names = ["danaus"]
    for info in pkgutil.walk_packages([str(PACKAGE)], prefix="danaus."):
        names.append(info.name)
    return sorted(names)


def needs_missing_extra(name: str) -> bool:
    return name.startswith("danaus.transports.ucx") and importlib.util.find_spec("ucxx") is None


IMPORT_EACH = """
import importlib, json, os, sys, traceback
for library in sys.argv[1:]:  # what Danaus imports, loaded once so that each fork starts quickly
    importlib.import_module(library)
assert not any(name == "danaus" or name.startswith("danaus.") for name in sys.modules)
failures = {}
running = {}
names = sys.stdin.read().split()
while names or running:
    if names and len(running) < os.cpu_count():  # a child per core at a time
        name = names.pop()
        pid = os.fork()
        if pid == 0:
            try:
                importlib.import_module(name)
            except BaseException:
                traceback.print_exc()
                os._exit(1)
            os._exit(0)
        running[pid] = name
        continue
    pid, status = os.wait()
    name = running.pop(pid)
    if status:
        failures[name] = status
print(json.dumps(failures))
"""
LIBRARIES = ["zmq", "msgspec", "cloudpickle", "greenlet", "rich", "asyncio"]
if importlib.util.find_spec("torch") is not None:
    LIBRARIES.append("torch")  # the tensor engine's modules import it: once, not once each


@pytest.mark.timeout(600)  # the hang guard is its interpreter's: two cores import some 220 modules
def test_every_module_imports_alone_in_a_fresh_interpreter():
    """An import cycle shows up as a failure when the cycle is entered from the wrong module.

    One fresh interpreter loads the third-party libraries, then forks a child per
    module (one per core at a time): each child imports its module with no
    Danaus module loaded before it.
    """
    names = [n for n in all_modules() if not needs_missing_extra(n)]
    assert "danaus.transports.tcp.launcher" in names and "danaus.core.transport" in names
    env = {k: v for k, v in os.environ.items() if k != "DANAUS_TRANSPORT"}
    done = subprocess.run(
        [sys.executable, "-c", IMPORT_EACH, *LIBRARIES],
        input=" ".join(names),
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == {}, done.stderr


NO_SIDE_EFFECTS = """
import asyncio, atexit, os, sys, threading, types
policy = type(asyncio.get_event_loop_policy())
import danaus
from danaus.core import config
assert type(danaus) is types.ModuleType, "the package's module class changed"
assert config.installed() is None, "a world was made"
assert threading.active_count() == 1, "a thread was started"
if os.environ.get("DANAUS_TRANSPORT") == "sim":  # the one exception: asyncio.run is routed
    assert type(asyncio.get_event_loop_policy()).__name__ == "_SimLoopPolicy"
    assert asyncio.get_event_loop_policy().previous.__class__ is policy
else:
    assert type(asyncio.get_event_loop_policy()) is policy, "the event loop policy changed"
    assert "danaus.transports" not in " ".join(sys.modules), "a transport was imported"
print("clean")
"""


@pytest.mark.parametrize("transport", [None, "sim", "tcp"])
def test_importing_danaus_makes_no_world_and_changes_nothing(transport):
    """Whatever transport the environment selects, importing only defines names (and, under
    sim, routes ``asyncio.run`` to the simulator)."""
    env = {k: v for k, v in os.environ.items() if k != "DANAUS_TRANSPORT"}
    if transport is not None:
        env["DANAUS_TRANSPORT"] = transport
    done = subprocess.run(
        [sys.executable, "-c", NO_SIDE_EFFECTS],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "clean"


def test_no_phantom_names():
    """Names that are listed exist: no submodule or transport that is not there."""
    with pytest.raises(AttributeError):
        danaus.gradient  # noqa: B018
    assert set(danaus._SUBMODULES) <= {info.name for info in pkgutil.iter_modules([str(PACKAGE)])}
    with pytest.raises(ValueError, match="unknown transport 'rdma'"):
        danaus.configure(transport="rdma")
    assert "verbs" in config.TRANSPORTS
    for transport in config.TRANSPORTS:
        assert importlib.util.find_spec(f"danaus.transports.{transport}") is not None
    for name in danaus.__all__:
        assert getattr(danaus, name) is not None


def test_the_lazy_names_are_those_their_modules_export():
    """The package lists the names it loads on first use (so that ``import danaus`` loads
    neither torch nor a transport): each list must stay within its module's ``__all__``."""
    pytest.importorskip("torch")
    workers = importlib.import_module("danaus.workers")
    tensor = importlib.import_module("danaus.tensor")
    assert set(danaus._FROM_WORKERS) <= set(workers.__all__)
    assert set(danaus._FROM_TENSOR) <= set(tensor.__all__)
