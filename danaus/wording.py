"""Counts in what Danaus prints for people: "1 seed", "2 seeds", "1,000 seeds"."""

from __future__ import annotations


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """``count`` and ``noun``, plural unless ``count`` is 1 (``plural``, else ``noun`` + "s")."""
    word = noun if count == 1 else plural or f"{noun}s"
    return f"{count:,} {word}"
