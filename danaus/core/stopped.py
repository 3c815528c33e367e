"""What stopping a mesh reports: the members it skipped because they were lost.

A stop (``mesh.stop()``, ``HostMesh.shutdown()``, the controller's exit) ends
what is still alive. A member whose proc or host was lost, before the stop or
while it ran, is skipped: the stop raises nothing for it, since its loss was
reported already or, once the stop had begun, is no failure. The stop's
future gives a `Stopped` that names each such member, and the owner logs one
line (on ``danaus.supervision``) for each mesh that had some: a warning if a
member was lost while the stop ran (news to everyone), else at info level.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from danaus.core.errors import SupervisionError
from danaus.core.shape import Point
from danaus.core.transport import ProcLoss

log = logging.getLogger("danaus.supervision")


@dataclass(frozen=True)
class LostMember:
    """A member of a mesh that a stop skipped: its proc (a host's: its agent) was lost."""

    mesh: str
    """The name of the mesh (``hosts`` for a host mesh)."""
    rank: Point
    """The member's position in the mesh."""
    loss: ProcLoss
    """Why it was lost: its proc, host and cause, as the loss was reported."""

    def __str__(self) -> str:
        coords = ", ".join(f"{k}={v}" for k, v in self.rank.items()) or "-"
        return f"{self.mesh} rank {coords}: {self.loss.describe()}"


@dataclass(frozen=True)
class Stopped:
    """The value of a stop's future: ``lost`` names the members it skipped, lost (in order)."""

    lost: tuple[LostMember, ...] = ()

    def __add__(self, other: Stopped) -> Stopped:
        return Stopped(self.lost + other.lost)


class Outcomes:
    """What each member of a mesh answered to one step of a stop: the losses, and other errors.

    Losses are expected (the stop skips those members); any other error is
    kept, and raised once the stop has done all it can (`raise_first`).
    """

    def __init__(self) -> None:
        self.errors: list[BaseException] = []

    def losses(self, outcomes: Sequence[Any]) -> dict[int, ProcLoss]:
        """The positions whose outcome is the loss of their proc (others' errors are kept)."""
        lost = {}
        for index, outcome in enumerate(outcomes):
            if isinstance(outcome, SupervisionError) and isinstance(outcome.failure, ProcLoss):
                lost[index] = outcome.failure
            elif isinstance(outcome, BaseException):
                self.errors.append(outcome)
        return lost

    def raise_first(self) -> None:
        if self.errors:
            raise self.errors[0]


def skipped(
    kind: str, name: str, lost: Sequence[LostMember], known: Collection[str]
) -> Stopped:
    """The report of a stop of ``kind`` mesh ``name`` that skipped ``lost``; logged if any.

    ``known``: the procs known lost when the stop began (their loss was reported).
    """
    if lost:
        news = any(member.loss.proc not in known for member in lost)
        log.log(
            logging.WARNING if news else logging.INFO,
            "stopping %s %r skipped %d lost member(s): %s",
            kind,
            name,
            len(lost),
            "; ".join(map(str, lost)),
        )
    return Stopped(tuple(lost))
