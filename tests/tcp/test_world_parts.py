"""A tcp-family world gives each of its parts what that part uses: none of them knows the world."""

from __future__ import annotations

import inspect
from pathlib import Path

import danaus
from danaus.transports.tcp.admin import AdminSocket
from danaus.transports.tcp.faults import SignalFaults
from danaus.transports.tcp.launcher import LocalLauncher
from tests.test_architecture import imported_modules

TRANSPORTS = Path(danaus.__file__).parent / "transports"
WORLD = "danaus.transports.tcp.world"


def test_only_the_transports_entry_points_import_the_world():
    importers = {
        str(path.relative_to(TRANSPORTS))
        for path in TRANSPORTS.rglob("*.py")
        if path.name != "world.py" and WORLD in imported_modules(path)
    }
    # The packages make their worlds; a worker process's entry point runs one.
    assert importers == {"tcp/__init__.py", "tcp/worker.py", "ucx/__init__.py", "verbs/__init__.py"}


def test_the_parts_take_what_they_use_by_name():
    for part in (LocalLauncher, SignalFaults, AdminSocket):
        parameters = inspect.signature(part).parameters
        assert "world" not in parameters, part
        assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in parameters.values()), part
