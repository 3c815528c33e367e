"""Stopping a job on three hosts that loses one, before the stop or while it runs.

`stop_losing_a_host` is the scenario; the tests give it a host mesh of three
hosts, how to stop (``stop``/``shutdown``) and how host 1 dies (its worker's
whole tree killed, or its machine crashed). The procs' ``__cleanup__`` on host
1 never ends when the host dies during the stop, so that the stop is still
waiting on it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

import danaus
from danaus import Actor, Channel, Future, HostMesh, MeshFailure, Port, current_rank, endpoint
from tests.tcp.conftest import alive, wait_until

VICTIM = 1
"""The host that is lost."""
LOST = [
    ("procs", {"hosts": VICTIM, "gpus": 0}),
    ("procs", {"hosts": VICTIM, "gpus": 1}),
    ("hosts", {"hosts": VICTIM}),
]
"""What the stop names as lost: the victim's procs, then the victim."""


class Lingering(Actor):
    """Says when its ``__cleanup__`` begins; on host ``stuck`` it then never ends it."""

    def __init__(self, cleanups: Port[dict[str, int]], stuck: int) -> None:
        self.cleanups = cleanups
        self.stuck = stuck
        self.rank = dict(current_rank())

    @endpoint
    def pid(self) -> int:
        return os.getpid()

    def __cleanup__(self, exc: BaseException | None) -> None:
        self.cleanups.send(self.rank)
        if self.rank["hosts"] == self.stuck:
            _, never = Channel.open()
            never.recv().get()


@dataclass
class Outcome:
    lost: list[tuple[str, dict[str, int]]]
    """What the stop's `Stopped` names."""
    failures: list[MeshFailure]
    """What reached the controller unhandled."""
    pids: list[int]
    """The job's procs."""


def stop_losing_a_host(
    hosts: HostMesh, stop: Callable[[], Future[danaus.Stopped]], kill: Callable[[], None], when: str
) -> Outcome:
    """Spawn 2 procs per host, lose host `VICTIM` ``when`` ("before" or "during") ``stop()``."""
    failures: list[MeshFailure] = []
    danaus.unhandled_fault_hook = failures.append
    cleanups, cleaned = Channel.open()
    procs = hosts.spawn_procs(per_host={"gpus": 2})
    members = procs.spawn("members", Lingering, cleanups, VICTIM if when == "during" else -1)
    pids = list(members.pid.call().get(timeout=120).values())
    if when == "before":
        kill()
        wait_until(lambda: len(failures) == 2, 60, "the loss of the host's two procs")
        stopping = stop()
    else:
        stopping = stop()
        begun = [cleaned.recv().get(timeout=60) for _ in range(6)]
        assert sorted(r["hosts"] for r in begun) == [0, 0, 1, 1, 2, 2]
        kill()
    lost = [(member.mesh, dict(member.rank)) for member in stopping.get(timeout=120).lost]
    wait_until(lambda: not any(map(alive, pids)), 60, "every proc of the job to end")
    return Outcome(lost, list(failures), pids)
