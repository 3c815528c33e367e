"""Supervision: failures travel up the tree of mesh owners.

Every mesh is owned by the actor (or the controller's client) that spawned it.
When a member fails, its owner is told with a `MeshFailure`: first its restart
policy may restart the member; otherwise ``__supervise__(failure)`` runs; a
truthy return handles it, a falsy one (or none defined) fails the owner in
turn, and an exception raised there fails it with that exception, chained. At
the root, `unhandled_fault_hook` gets the failure.
"""

from __future__ import annotations

import random
import sys
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from danaus.core import last_words
from danaus.core.shape import Point

if TYPE_CHECKING:
    from danaus.core.actor_mesh import ActorMesh


@dataclass
class MeshFailure:
    """What failed, where, and why: given to ``__supervise__`` and ``unhandled_fault_hook``.

    ``rank`` is the failed member's position in the mesh; ``cause`` says what
    happened (an exception with its remote ``traceback``, a process exit with
    ``exit_code`` or ``signal``, lost heartbeats...). ``chained`` is the failure
    that led to this one, when an owner failed because a child failed.
    """

    mesh_name: str
    mesh_id: str
    rank: Point
    actor_id: str
    proc: str
    host: str | None
    pid: int | None
    cause: str
    traceback: str | None = None
    exit_code: int | None = None
    signal: int | None = None
    chained: MeshFailure | None = None
    actor_class: str | None = None
    """The failed actor's class: its module and qualified name (`class_path`)."""
    mesh: ActorMesh[Any] | None = field(default=None, compare=False, repr=False)

    def report(self) -> str:
        """A readable account of the failure and the chain that led to it.

        The first line names the failure at the root of the chain and its cause, as
        Monarch's reports do (by its class, mesh and rank, after those of the failed
        owners above it); then each failure from this one down to that root, with its
        cause (the root's is said once, on the first line).
        """
        chain = [self]
        while chain[-1].chained is not None:
            chain.append(chain[-1].chained)
        path = " / ".join(failure.actor_name() for failure in chain)
        lines = [f"The actor {path} and all its descendants have failed: {chain[-1].cause}"]
        failure: MeshFailure | None = self
        depth = 0
        while failure is not None:
            lead = "caused by: " if depth else ""
            lines.append(f"{lead}{failure._headline()}")
            if failure.chained is not None:
                lines.append(f"  cause: {failure.cause}")
            if failure.traceback:
                lines.extend("  " + line for line in failure.traceback.rstrip().splitlines())
            failure = failure.chained
            depth += 1
        return "\n".join(lines)

    def actor_name(self) -> str:
        """The failed actor as reports name it: its class, mesh name and rank."""
        name = f"{self.mesh_name}{self.rank}"
        return f"{self.actor_class} {name}" if self.actor_class else name

    def _headline(self) -> str:
        coords = ", ".join(f"{k}={v}" for k, v in self.rank.items()) or "-"
        where = f"proc {self.proc}"
        if self.host:
            where += f" on host {self.host}"
        if self.pid is not None:
            where += f" (pid {self.pid})"
        status = ""
        if self.exit_code is not None:
            status = f", exit code {self.exit_code}"
        elif self.signal is not None:
            status = f", signal {self.signal}"
        who = f"{self.actor_id}, {self.actor_class}" if self.actor_class else self.actor_id
        return f"mesh {self.mesh_name!r} rank {coords} ({who}) failed on {where}{status}"

    def __str__(self) -> str:
        """One line, in Monarch's form: the mesh, the failed rank's index in it, and the event."""
        return (
            f"MeshFailure(mesh_name={self.mesh_name}, crashed_ranks=[{self.rank.rank}], "
            f"event={self._headline()}: {self.cause})"
        )

    def __getstate__(self) -> dict[str, Any]:
        """Travels without ``mesh``: the owner's handle, set again where the failure is received."""
        return {**self.__dict__, "mesh": None}


@dataclass(frozen=True)
class RestartPolicy:
    """How an owner restarts the members of a mesh that fail.

    ``strategy``: ``"one_for_one"`` restarts the failed member only;
    ``"one_for_all"`` restarts every member. At most ``max_restarts`` restarts
    within ``window`` seconds; one more failure escalates as if there were no
    policy. Restarts wait ``backoff * 2**n`` seconds (n: restarts already in the
    window), at most ``max_backoff``, stretched by up to ``jitter`` (a fraction).
    """

    strategy: Literal["one_for_one", "one_for_all"] = "one_for_one"
    max_restarts: int = 3
    window: float = 60.0
    backoff: float = 0.1
    max_backoff: float = 10.0
    jitter: float = 0.1

    def __post_init__(self) -> None:
        if self.strategy not in ("one_for_one", "one_for_all"):
            raise ValueError(
                f"strategy must be 'one_for_one' or 'one_for_all', not {self.strategy!r}"
            )
        if self.max_restarts < 0 or self.window <= 0:
            raise ValueError("max_restarts must be >= 0 and window > 0")
        if self.backoff < 0 or self.max_backoff < self.backoff or not 0 <= self.jitter <= 1:
            raise ValueError("need 0 <= backoff <= max_backoff and 0 <= jitter <= 1")


class RestartBudget:
    """The restarts a mesh has used within its policy's window."""

    def __init__(self, policy: RestartPolicy) -> None:
        self.policy = policy
        self._times: deque[float] = deque()

    def next_delay(self, now: float, rng: random.Random) -> float | None:
        """Seconds to wait before the next restart, or None when the budget is spent."""
        policy = self.policy
        while self._times and now - self._times[0] > policy.window:
            self._times.popleft()
        if len(self._times) >= policy.max_restarts:
            return None
        delay = min(policy.max_backoff, policy.backoff * 2 ** len(self._times))
        self._times.append(now)
        return delay * (1 + policy.jitter * rng.random())


def default_unhandled_fault_hook(failure: MeshFailure) -> None:
    """Print a report of the failure and end the controller with status 1."""
    report = f"danaus: unhandled failure; the controller exits\n{failure.report()}"
    with last_words.printing():
        print(report, file=sys.stderr)
    raise SystemExit(1)


def class_path(cls: type) -> str:
    """A class as failure reports name it: ``module.QualifiedName``."""
    return f"{cls.__module__}.{cls.__qualname__}"
