"""Sets of tasks held weakly: those of each simulated proc (a crash of the proc ends them all),
and those of the whole simulated cluster.

A `weakref.WeakSet` would do, but a world of thousands of procs keeps one per
proc for its whole run, and each WeakSet is seven objects the garbage collector
walks (its set of references, another set, a list, its callback, the callback's
closure), and adds each task through a call of Python's; `TaskRefs` is two
objects, and adds in C. It holds the same weak references in a set, added and
dropped as a WeakSet's are, so its tasks come in the order a WeakSet's did.
"""

from __future__ import annotations

import asyncio
import weakref
from typing import Any


class TaskRefs(set["weakref.ref[asyncio.Task[Any]]"]):
    """Weak references to live tasks; a task's reference goes when the task does."""

    __slots__ = ("_drop",)

    def __init__(self) -> None:
        super().__init__()
        self._drop = self.discard
        """Every reference's callback: one bound method for all of them, not one each."""

    def add_task(self, task: asyncio.Task[Any]) -> None:
        self.add(weakref.ref(task, self._drop))

    def holds(self, task: asyncio.Task[Any]) -> bool:
        return weakref.ref(task) in self

    def tasks(self) -> list[asyncio.Task[Any]]:
        """The tasks still alive, read from a copy of the set: a collection of garbage while
        they are read may drop a reference (a WeakSet defers that instead)."""
        return [task for ref in tuple(self) if (task := ref()) is not None]
