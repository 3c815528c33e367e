"""The conformance suite runs every test over every transport present.

A test is a controller program: a ``main`` function (sync or async) handed to
the ``run`` fixture, which runs it on the transport the test is parametrized
with and returns what ``main`` returned. Runs on a cluster of hosts are marked
``multihost`` (select them with ``-m multihost``, leave them out with
``-m "not multihost"``); they are skipped where namespaces cannot be made.

Over twenty schedule seeds of the simulator (a few minutes; not part of the
default run):

    pytest tests/conformance --danaus-sim --danaus-seeds 0:20
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable
from typing import Any

import pytest

from danaus.core.settings import Settings
from tests.conformance.transports import Transport, available

_turns = itertools.count()
"""Which host of the cluster the next test's controller attaches to."""


def _params() -> list[Any]:
    return [
        pytest.param(t, id=t.id, marks=[pytest.mark.multihost] if t.cluster else [])
        for t in available()
    ]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The suite runs transport by transport; under ``--danaus-sim`` only on the simulator."""
    _by_transport(items)
    if not config.getoption("--danaus-sim", default=False):
        return
    real = [item for item in items if _transport_of(item) not in (None, "sim")]
    if real:
        config.hook.pytest_deselected(items=real)
        items[:] = [item for item in items if item not in real]


def _by_transport(items: list[pytest.Item]) -> None:
    """Put the suite's tests in the order of `available`, each transport's in module order.

    A transport's fork server, kept between worlds, and a cluster's waiting host
    agents, started for the transport of the last job, then serve one test
    after another, instead of being started again for each module's first tests.
    """
    order = {transport.id: index for index, transport in enumerate(available())}
    places = [index for index, item in enumerate(items) if _transport(item) is not None]
    ranked = sorted((items[index] for index in places), key=lambda item: order[_transport(item).id])
    for index, item in zip(places, ranked, strict=True):
        items[index] = item


def _transport(item: pytest.Item) -> Transport | None:
    callspec = getattr(item, "callspec", None)
    param = callspec.params.get("transport") if callspec is not None else None
    return param if isinstance(param, Transport) else None


def _transport_of(item: pytest.Item) -> str | None:
    transport = _transport(item)
    return transport.name if transport is not None else None


@pytest.fixture(params=_params(), scope="module")
def transport(request: pytest.FixtureRequest) -> Transport:
    return request.param


@pytest.fixture
def job(transport: Transport, request: pytest.FixtureRequest) -> dict[str, Any]:
    """The host a cluster run attaches to: its ``configure()`` options and environment."""
    if not transport.cluster:
        return {"options": {}, "environment": {}}
    cluster = request.getfixturevalue("namespace_cluster")
    host = next(_turns)
    return {
        "options": cluster.controller_options(host, count=1),
        "environment": cluster.controller_environment(host, count=1),
    }


@pytest.fixture
def run(transport: Transport, job: dict[str, Any]) -> Callable[..., Any]:
    """Run a controller ``main`` on the transport under test."""
    return functools.partial(transport.run, **job["options"])


@pytest.fixture
def run_with_torch(transport: Transport, run: Callable[..., Any]) -> Callable[..., Any]:
    """`run`, for a ``main`` whose procs receive tensors: this process's fork servers import
    torch once (``preload``), instead of every such proc importing it (over a second of CPU).

    Not on a cluster: its hosts start a fork server for every job (ahead of time, with the
    last job's preloads), which would import torch as often as the procs do.
    """
    if not transport.real or transport.cluster:
        return run
    return functools.partial(run, preload=[*Settings.read("preload"), "torch"])


@pytest.fixture
def controller_environment(transport: Transport, job: dict[str, Any]) -> dict[str, str]:
    """The environment of a controller process run on the transport under test."""
    return {"DANAUS_TRANSPORT": transport.name, **transport.environment, **job["environment"]}
