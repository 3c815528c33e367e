"""Suggestions for a mistyped name (an endpoint, an option): the closest of the names there are."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def close_names(name: str, names: Iterable[str]) -> str:
    """``" (did you mean 'a' or 'b'?)"`` with those of ``names`` closest to ``name``, or ``""``."""
    close = difflib.get_close_matches(name, list(names), n=3, cutoff=0.6)
    return f" (did you mean {' or '.join(repr(n) for n in close)}?)" if close else ""
