"""Fixtures for every test."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

import pytest
from hypothesis import settings

import danaus
from danaus import MeshFailure
from danaus.core import config
from danaus.core.supervision import default_unhandled_fault_hook
from tests.cluster import CLUSTER_SIZE, Cluster, cluster, unavailable

# Workers unpickle the suite's actors by importing their test modules, and so pytest: the
# fork servers that start them import it once, before they fork (``preload``).
os.environ.setdefault("DANAUS_PRELOAD", "pytest")

SHARED_RESOURCES = {"namespace_cluster": "cluster", "slurm_cluster": "slurm"}
"""Session-wide resources, by fixture, and the group of tests that share one (pytest-xdist)."""


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests that share a session's cluster run in one xdist worker (``--dist loadgroup``).

    A worker that runs none of them never makes the cluster; the suite's other
    tests spread over the workers as they free up. First of the hooks, since
    xdist's own reads the groups to name each test's work unit.
    """
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if item.get_closest_marker("multihost") is not None:
            fixtures.add("namespace_cluster")
        for fixture, group in SHARED_RESOURCES.items():
            if fixture in fixtures:
                item.add_marker(pytest.mark.xdist_group(group))


# No test may depend on the machine's speed: hypothesis's 200 ms deadline per
# example does, on a loaded machine.
settings.register_profile("danaus", deadline=None)
settings.load_profile("danaus")


@pytest.fixture(autouse=True)
def _unhandled_failures_fail_the_test() -> Iterator[None]:
    """A failure that no owner handled fails the test, instead of ending pytest's process.

    The default hook ends the controller, which is pytest's process here: every
    later test would be lost, and the report with them. A test that replaces
    the hook itself keeps its own; the default is put back afterwards.
    """
    unhandled: list[MeshFailure] = []
    danaus.unhandled_fault_hook = unhandled.append
    yield
    danaus.unhandled_fault_hook = default_unhandled_fault_hook
    if unhandled:
        pytest.fail(f"a failure reached the controller unhandled:\n{unhandled[0].report()}")


@pytest.fixture
def tcp() -> Iterator[Callable[..., object]]:
    """Configure a tcp world with the given options; it is shut down after the test."""

    def start(**options: object) -> object:
        danaus.configure(transport="tcp", **options)
        return config.current_world()

    try:
        yield start
    finally:
        danaus.shutdown()


@pytest.fixture(scope="session")
def namespace_cluster() -> Iterator[Cluster]:
    """Three hosts (network namespaces, a worker in each), shared by the session's tests.

    Tests that break a host (kill its worker, cut its link) mend it before they end.
    """
    why = unavailable()
    if why is not None:
        pytest.skip(why)
    with cluster(CLUSTER_SIZE, danaus.make_job_key()) as made:
        yield made
