"""pytest integration: run a scenario over many seeds as parametrized tests.

    @pytest.mark.chaos_seeds(0, 200)
    def test_store(chaos_seed):
        check_seed(KVStore(), chaos_seed)

Each seed is a test of its own (``test_store[seed17]``); a failing one reports
its plan, its violations and the command that replays it. ``--chaos-seeds
START:STOP`` overrides every marker's range.
"""

from __future__ import annotations

from typing import Any

import pytest


def pytest_addoption(parser: Any) -> None:
    parser.addoption(
        "--chaos-seeds",
        default=None,
        metavar="START:STOP|N",
        help="run tests using chaos_seed over these seeds instead of their markers'",
    )


def pytest_configure(config: Any) -> None:
    config.addinivalue_line(
        "markers", "chaos_seeds(start, stop): run the test once per seed in range(start, stop)"
    )


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
