"""The conformance suite runs every test over every transport present.

A test is a controller program: a ``main`` function (sync or async) handed to
the ``run`` fixture, which runs it on the transport the test is parametrized
with and returns what ``main`` returned.

Over twenty schedule seeds of the simulator (a few minutes; not part of the
default run):

    pytest tests/conformance --danaus-sim --danaus-seeds 0:20
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.conformance.transports import Transport, available


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under ``--danaus-sim`` only the simulator's instances of the suite run."""
    if not config.getoption("--danaus-sim", default=False):
        return
    real = [item for item in items if _transport_of(item) not in (None, "sim")]
    if real:
        config.hook.pytest_deselected(items=real)
        items[:] = [item for item in items if item not in real]


def _transport_of(item: pytest.Item) -> str | None:
    callspec = getattr(item, "callspec", None)
    param = callspec.params.get("transport") if callspec is not None else None
    return param.name if isinstance(param, Transport) else None


@pytest.fixture(params=available(), ids=lambda t: t.name)
def transport(request: pytest.FixtureRequest) -> Transport:
    return request.param


@pytest.fixture
def run(transport: Transport) -> Callable[..., Any]:
    """Run a controller ``main`` on the transport under test."""
    return transport.run
