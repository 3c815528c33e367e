"""Fault injection and chaos testing."""

from danaus.chaos.faults import crash, pause, resume

__all__ = ["crash", "pause", "resume"]
