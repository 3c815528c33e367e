"""Fixtures of the chaos toolkit's tests: the dashboard tests' headless browser and their
screenshots, for the page a chaos run writes (``--report``)."""

from tests.dashboard.conftest import browser, screenshots  # noqa: F401 (fixtures)
