"""pytest integration: chaos scenarios over many seeds, and any suite on the simulator.

    @pytest.mark.chaos_seeds(0, 200)
    def test_store(chaos_seed):
        check_seed(KVStore(), chaos_seed)

Each seed is a test of its own (``test_store[seed17]``); a failing one reports
its plan, its violations and the command that replays it. ``--chaos-seeds
START:STOP`` overrides every marker's range.

``--danaus-sim`` runs every test of the session on the simulator, once per
schedule seed of ``--danaus-seeds`` (see `danaus.chaos.sim_switch`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest


def pytest_addoption(parser: Any) -> None:
    parser.addoption(
        "--chaos-seeds",
        default=None,
        metavar="START:STOP|N",
        help="run tests using chaos_seed over these seeds instead of their markers'",
    )
    group = parser.getgroup("danaus", "Danaus simulator")
    group.addoption(
        "--danaus-sim",
        action="store_true",
        help="run every test on Danaus's simulator, once per schedule seed of --danaus-seeds",
    )
    group.addoption(
        "--danaus-seeds",
        default="0",
        metavar="START:STOP|N",
        help="the schedule seeds of --danaus-sim (default 0: the simulator's default schedule)",
    )
    group.addoption(
        "--danaus-traces",
        default=None,
        metavar="DIR",
        help="with --danaus-sim: write the traces of failing seeds to DIR (JSON lines, HTML, "
        "Perfetto)",
    )


def pytest_configure(config: Any) -> None:
    config.addinivalue_line(
        "markers", "chaos_seeds(start, stop): run the test once per seed in range(start, stop)"
    )
    config.addinivalue_line(
        "markers",
        "danaus_default_schedule: under --danaus-seeds, run only on schedule seed 0 (the test "
        "checks what the default schedule does, exactly)",
    )
    if config.getoption("--danaus-sim"):
        from danaus.chaos.runner import seed_range
        from danaus.chaos.sim_switch import SimSwitch

        try:
            seeds = seed_range(config.getoption("--danaus-seeds"))
        except ValueError as exc:
            raise pytest.UsageError(f"--danaus-seeds: {exc}") from None
        traces = config.getoption("--danaus-traces")
        switch = SimSwitch(seeds, Path(traces).resolve() if traces else None)
        config.pluginmanager.register(switch, "danaus-sim")
        switch.pytest_configure(config)


def pytest_generate_tests(metafunc: Any) -> None:
    if "chaos_seed" not in metafunc.fixturenames:
        return
    override = metafunc.config.getoption("--chaos-seeds")
    if override:
        from danaus.chaos.runner import seed_range  # only where a test uses chaos_seed

        try:
            seeds = seed_range(override)
        except ValueError as exc:
            raise pytest.UsageError(f"--chaos-seeds: {exc}") from None
    else:
        marker = metafunc.definition.get_closest_marker("chaos_seeds")
        seeds = range(*marker.args) if marker is not None else range(20)
    metafunc.parametrize("chaos_seed", list(seeds), ids=[f"seed{s}" for s in seeds])
