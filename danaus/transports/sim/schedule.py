"""Schedule exploration: each seed picks one of the orders a program's semantics allow.

A simulated run is one interleaving of everything that happens concurrently
on a real cluster. A bug that needs another interleaving never shows on the
default one, however often it runs. With a schedule seed other than 0, a world
perturbs what the semantics leave open, and only that:

* message latencies: every message takes an extra delay drawn from the seed
  (with a mean the seed picks too, from 10 µs to 1 ms), so messages from
  different senders arrive in other orders; messages from one proc to another
  still never overtake each other (per-pair FIFO holds);
* the order in which actors run: the callbacks ready in one iteration of the
  loop are regrouped by the actor they run for (see `owner_of`), and the
  groups interleave in an order drawn from the seed; now and then a group
  waits for the next iteration, as an actor whose thread was not scheduled
  would. Each actor's own callbacks keep their order, as on its own thread.

Within a seed the run is deterministic. Seed 0 perturbs nothing: a world then
runs exactly as it always has.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from danaus.core.context import peek_context
from danaus.transports.sim.loop import Handle

_MEAN_DELAYS = (10e-6, 100e-6, 1e-3)
"""The mean extra latency of a message: each seed picks one."""

_WAIT_CHANCES = (0.0, 0.1, 0.3)
"""How often an actor's callbacks wait for the next iteration: each seed picks one."""


def owner_of(handle: Handle) -> Any:
    """The actor whose code a callback runs (its own thread, on a real transport).

    None for the runtime's and the controller's callbacks.
    """
    try:
        ctx = handle.get_context().run(peek_context)
    except RuntimeError:  # the context of the task running now is entered already
        ctx = peek_context()
    return None if ctx is None else ctx.actor_instance


class Exploration:
    """The perturbations of one schedule seed: for the loop (`order`) and the network (`delay`)."""

    def __init__(self, seed: int, owner: Callable[[Handle], Any] = owner_of) -> None:
        self.seed = seed
        self._owner = owner
        picks = random.Random(f"danaus-schedule-{seed}")
        self._mean_delay = picks.choice(_MEAN_DELAYS)
        self._wait_chance = picks.choice(_WAIT_CHANCES)
        self._order_rng = random.Random(picks.random())
        self._delay_rng = random.Random(picks.random())

    def delay(self) -> float:
        """The extra latency of the next message."""
        return self._delay_rng.expovariate(1.0 / self._mean_delay)

    def order(self, batch: list[Handle]) -> tuple[list[Handle], list[Handle]]:
        """Interleave the actors' callbacks at random; some actors wait for the next iteration."""
        groups: dict[int, list[Handle]] = {}
        for handle in batch:
            key = None if handle.cancelled() else self._owner(handle)
            groups.setdefault(id(key), []).append(handle)
        if len(groups) == 1:
            return batch, []
        rng = self._order_rng
        lists = list(groups.values())
        waits = [rng.random() < self._wait_chance for _ in lists]
        if all(waits):
            waits[rng.randrange(len(lists))] = False
        later = [h for group, wait in zip(lists, waits) if wait for h in group]
        running = [group for group, wait in zip(lists, waits) if not wait]
        heads = [0] * len(running)
        first: list[Handle] = []
        while running:
            i = rng.randrange(len(running))
            group = running[i]
            first.append(group[heads[i]])
            heads[i] += 1
            if heads[i] == len(group):
                del running[i], heads[i]
        return first, later
