"""Actors that import while they are built, several at once on one proc, round after round.

Run as a program: its actor classes live in ``__main__``, so they travel by value,
and the proc that builds them imports the modules their code uses
(`tests.programs.slow_cycle`, a package with an import cycle) while it
unpickles them, on each actor's own thread. Each round spawns a fresh proc, so
each imports the package anew. Prints one line per round; exits 1 at the first
actor that failed.

    python tests/programs/concurrent_imports.py ROUNDS
"""

from __future__ import annotations

import sys

import danaus
from danaus import Actor, endpoint, this_host
from tests.programs import slow_cycle
from tests.programs.slow_cycle import leaf


class UsesPackage(Actor):
    @endpoint
    def value(self) -> int:
        return slow_cycle.VALUE


class UsesLeaf(Actor):
    @endpoint
    def value(self) -> int:
        return leaf.package_value()


BUILT_AT_ONCE = (UsesPackage, UsesLeaf, UsesLeaf)


def main(rounds: int) -> int:
    for turn in range(rounds):
        procs = this_host().spawn_procs({"w": 1})
        actors = [procs.spawn(f"a{i}", cls) for i, cls in enumerate(BUILT_AT_ONCE)]
        try:
            values = [actor.value.call_one().get(timeout=120) for actor in actors]
        except Exception as exc:
            print(f"round {turn}: {exc}")
            return 1
        print(f"round {turn}: {values}")
        procs.stop().get(timeout=60)
    return 0


if __name__ == "__main__":
    danaus.unhandled_fault_hook = lambda failure: None
    sys.exit(main(int(sys.argv[1])))
