"""Fixtures for every test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import danaus
from danaus.core.supervision import default_unhandled_fault_hook


@pytest.fixture(autouse=True)
def _restore_fault_hook() -> Iterator[None]:
    """Put back the default unhandled-fault hook a test may have replaced."""
    yield
    danaus.unhandled_fault_hook = default_unhandled_fault_hook
