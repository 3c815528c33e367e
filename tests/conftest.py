"""Fixtures for every test."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from hypothesis import settings

import danaus
from danaus import MeshFailure
from danaus.core import config
from danaus.core.supervision import default_unhandled_fault_hook
from tests.cluster import CLUSTER_SIZE, Cluster, cluster, unavailable

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
