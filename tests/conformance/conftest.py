"""The conformance suite runs every test over every transport present.

A test is a controller program: a ``main`` function (sync or async) handed to
the ``run`` fixture, which runs it on the transport the test is parametrized
with and returns what ``main`` returned.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.conformance.transports import Transport, available


@pytest.fixture(params=available(), ids=lambda t: t.name)
def transport(request: pytest.FixtureRequest) -> Transport:
    return request.param


@pytest.fixture
def run(transport: Transport) -> Callable[..., Any]:
    """Run a controller ``main`` on the transport under test."""
    return transport.run
