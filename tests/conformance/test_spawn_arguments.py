"""The arguments a mesh is spawned with: every member is built from its own copy of them."""

from __future__ import annotations

from danaus import Actor, current_rank, endpoint, this_host


class Keeper(Actor):
    """Changes what it was given in ``__init__``: no other member may see the change."""

    def __init__(self, seen: list[int], label: tuple[str, int], notes: dict[str, int]) -> None:
        seen.append(current_rank().rank)
        notes[str(current_rank().rank)] = len(seen)
        self.seen, self.label, self.notes = seen, label, notes

    @endpoint
    def kept(self) -> tuple[list[int], tuple[str, int], dict[str, int]]:
        return self.seen, self.label, self.notes


def test_each_member_changes_only_its_own_arguments(run):
    def main():
        seen = [-1]
        mesh = (
            this_host()
            .spawn_procs({"gpus": 4})
            .spawn("keeper", Keeper, seen, ("label", 7), notes={"given": 0})
        )
        return list(mesh.kept.call().get().values()), seen

    answers, seen = run(main)
    assert seen == [-1]
    assert answers == [([-1, rank], ("label", 7), {"given": 0, str(rank): 2}) for rank in range(4)]


class Fixed(Actor):
    """Built from arguments that nothing can change, which members may share."""

    def __init__(self, name: str, sizes: tuple[int, ...], kind: type, scale: float = 1.0) -> None:
        self.name, self.sizes, self.kind, self.scale = name, sizes, kind, scale

    @endpoint
    def describe(self) -> str:
        return f"{current_rank().rank}:{self.name}:{self.sizes}:{self.kind.__name__}:{self.scale}"


def test_members_built_from_unchangeable_arguments_see_them_all(run):
    def main():
        mesh = (
            this_host().spawn_procs({"gpus": 3}).spawn("fixed", Fixed, "a", (1, 2), int, scale=0.5)
        )
        return list(mesh.describe.call().get().values())

    assert run(main) == [f"{rank}:a:(1, 2):int:0.5" for rank in range(3)]
