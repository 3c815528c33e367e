"""The conformance suite runs every test over every transport present.

A test is a controller program: a ``main`` function (sync or async) handed to
the ``run`` fixture, which runs it on the transport the test is parametrized
with and returns what ``main`` returned.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import danaus
from danaus.core.supervision import default_unhandled_fault_hook
from tests.conformance.transports import Transport, available


@pytest.fixture(params=available(), ids=lambda t: t.name)
def transport(request: pytest.FixtureRequest) -> Transport:
    return request.param


@pytest.fixture
def run(transport: Transport) -> Callable[..., Any]:
    """Run a controller ``main`` on the transport under test."""
    return transport.run


@pytest.fixture(autouse=True)
def _restore_fault_hook():
    yield
    danaus.unhandled_fault_hook = default_unhandled_fault_hook
