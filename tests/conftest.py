"""Fixtures for every test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import settings

import danaus
from danaus.core.supervision import default_unhandled_fault_hook
from tests.cluster import CLUSTER_SIZE, Cluster, cluster, unavailable

# No test may depend on the machine's speed: hypothesis's 200 ms deadline per
# example does, on a loaded machine.
settings.register_profile("danaus", deadline=None)
settings.load_profile("danaus")


@pytest.fixture(autouse=True)
def _restore_fault_hook() -> Iterator[None]:
    """Put back the default unhandled-fault hook a test may have replaced."""
    yield
    danaus.unhandled_fault_hook = default_unhandled_fault_hook


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
