"""The tensor engine's tests: each runs a controller program on sim, tcp and ucx.

The transports and their runners are the conformance suite's
(``tests/conformance/transports.py``), without its clusters and without verbs;
on the real ones, the fork servers import torch once (``preload``), so that
every proc does not. Tests that check details the transports do not change run
on the simulator alone (the ``sim`` fixture), where a run costs a fraction of a
second.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import pytest

from danaus.core.settings import Settings
from tests.conformance.transports import Transport, available

pytest.importorskip("torch")

TRANSPORTS = [t for t in available() if t.name in ("sim", "tcp", "ucx") and not t.cluster]


sim_and_tcp = pytest.mark.parametrize(
    "transport",
    [t for t in TRANSPORTS if t.name in ("sim", "tcp")],
    ids=lambda t: t.id,
    indirect=True,
)
"""For a test whose point another test already makes on ucx: the suite stays short."""


@pytest.fixture(params=TRANSPORTS, ids=lambda t: t.id, scope="module")
def transport(request: pytest.FixtureRequest) -> Transport:
    return request.param


@pytest.fixture
def run(transport: Transport) -> Callable[..., Any]:
    """Run a controller ``main`` on the transport under test."""
    if not transport.real:
        return transport.run
    return functools.partial(transport.run, preload=[*Settings.read("preload"), "torch"])


@pytest.fixture
def sim() -> Callable[..., Any]:
    """Run a controller ``main`` on the simulator (two hosts, seed 0)."""
    return TRANSPORTS[0].run
