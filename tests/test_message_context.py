"""What an actor sees of the message it handles: its rank and the extent of the messaged slice."""

from __future__ import annotations

import danaus.sim
from danaus import Actor, context, current_rank, current_size, endpoint, this_host


class Where(Actor):
    @endpoint
    def where(self) -> tuple[int, dict[str, int]]:
        return current_rank().rank, current_size()

    @endpoint
    def same_context(self, first: bool) -> bool:
        """Whether this message's context object is the one the last message had."""
        seen = context()
        previous = getattr(self, "seen", None)
        self.seen = seen
        return not first and seen is previous


def test_each_message_sees_its_own_point_of_its_own_slice():
    def main() -> list[object]:
        mesh = this_host().spawn_procs({"gpus": 4}).spawn("where", Where)
        return [
            list(mesh.where.call().get().values())[2],
            next(iter(mesh.slice(gpus=slice(2, 4)).where.call().get().values())),
            mesh.slice(gpus=2).where.call_one().get(),
            list(mesh.where.call().get().values())[2],
        ]

    assert danaus.sim.run(main).value == [
        (2, {"gpus": 4}),
        (0, {"gpus": 2}),
        (0, {}),
        (2, {"gpus": 4}),
    ]


def test_calls_at_the_same_point_of_the_same_slice_share_one_context():
    def main() -> list[bool]:
        mesh = this_host().spawn_procs({"gpus": 2}).spawn("where", Where)
        first = mesh.same_context.call(True).get().values()
        again = mesh.same_context.call(False).get().values()
        return [*first, *again]

    assert danaus.sim.run(main).value == [False, False, True, True]
