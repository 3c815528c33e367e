"""Python's cyclic garbage collector, run less often while a simulated world runs.

A simulated cluster keeps about a hundred container objects per proc alive
for its whole run (runtimes, actors, their tasks and mailboxes), and each
message in flight holds a few more until it is delivered. With the
collector's default threshold (a young collection every 700 new containers),
messages of a broadcast to thousands of procs live through many young
collections and are promoted to the oldest generation, whose full
collections then walk the whole cluster again and again: a third of the
simulator's time at 10,000 procs. With young collections every
``YOUNG_THRESHOLD`` allocations most messages are gone before a collection
sees them. Collections still run; only when does change, and nothing a
simulated program does depends on that. At 10,000 procs, young collections
every 100,000 allocations instead of 10,000 halve the collector's time in
broadcast rounds and take a third off the set-up, for about 100 MB more at
the peak (`benchmarks/sim_scale.py`).

What survives a young collection is, in a simulated world, nearly all state
that lives as long as the world (procs, actors, their tasks). The middle
generation is collected every ``MIDDLE_THRESHOLD`` young collections rather
than Python's 10: setting up 10,000 procs made two such collections, which
walked about a million objects each, took as long as all its young
collections together, and found some 5,000 objects to free. Garbage that
survives a young collection waits longer for a middle one; what the
collector costs per young collection over a long run stays the same, since
each middle collection walks what the young ones passed on since the last.
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 100_000
"""New container objects between two young collections while a world runs (Python's: 700)."""

MIDDLE_THRESHOLD = 100
"""Young collections between two of the middle generation while a world runs (Python's: 10)."""


class CollectorTuning:
    """Raises the collector's young and middle thresholds now; `restore` puts back what they were.

    A threshold already higher, or a young one of 0 (automatic collection off),
    is kept. If something else changed the thresholds meanwhile, `restore`
    leaves them be.
    """

    def __init__(self) -> None:
        self._previous = gc.get_threshold()
        young, middle, *older = self._previous
        if young != 0:
            young = max(young, YOUNG_THRESHOLD)
        self._tuned = (young, max(middle, MIDDLE_THRESHOLD), *older)
        gc.set_threshold(*self._tuned)

    def restore(self) -> None:
        if gc.get_threshold() == self._tuned:
            gc.set_threshold(*self._previous)
