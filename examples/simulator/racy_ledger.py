"""A deliberately broken actor program: its bug shows only on some schedules.

Two writers each record an entry in a ledger with ``broadcast``, which returns
once the message is sent, not once it is handled. The controller waits for
writer ``a`` to finish before it asks writer ``b``, and so assumes that ``a``'s
entry comes first. But the entries travel from different senders, and nothing
orders messages from different senders: on the simulator's default schedule
``a``'s arrives first, on some other schedules ``b``'s does.
"""

from __future__ import annotations

from danaus import Actor, ActorMesh, endpoint, this_host


class Ledger(Actor):
    def __init__(self) -> None:
        self.entries: list[str] = []

    @endpoint
    def record(self, entry: str) -> None:
        self.entries.append(entry)

    @endpoint
    def read(self) -> list[str]:
        return list(self.entries)


class Writer(Actor):
    @endpoint
    def write(self, ledger: ActorMesh, entry: str) -> None:
        ledger.record.broadcast(entry)  # the bug: sent, but not yet recorded, on return


def main() -> list[str]:
    procs = this_host().spawn_procs(per_host={"gpus": 3})
    ledger = procs.slice(gpus=0).spawn("ledger", Ledger)
    a = procs.slice(gpus=1).spawn("a", Writer)
    b = procs.slice(gpus=2).spawn("b", Writer)
    a.write.call_one(ledger, "a").get()
    b.write.call_one(ledger, "b").get()
    return ledger.read.call_one().get()
