"""`Simulator`: a mesh whose procs time the commands they are sent, instead of running them.

Monarch's ``monarch.Simulator``: a way to see, before running a program for
real, how its work spreads over the streams of each proc. Operations on its
mesh are recorded and batched exactly as on a real one, but the batches go to
a timeline instead of to procs: each command takes a fixed time on its
stream (a collective waits for every proc of its group), a stream that waits
for another's event waits in the timeline too, and ``display()`` prints every
proc's streams as bars of text. There are no values: fetching one raises.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from danaus.core.actor_mesh import placement_of
from danaus.core.context import context
from danaus.core.mesh import HostMesh, ProcMesh
from danaus.core.shape import Extent, Shape
from danaus.tensor import commands
from danaus.tensor.delivery import Delivery, Segments
from danaus.tensor.engine import Engine, register

COSTS = {
    commands.CALL: 1.0,
    commands.REMOTE: 1.0,
    commands.REDUCE: 4.0,
    commands.SEND: 2.0,
    commands.RECV: 2.0,
}
"""How long each kind of command takes, in units of one operator (the rest take no time)."""

MARKS = {commands.REDUCE: "=", commands.SEND: ">", commands.RECV: "<"}
"""How `display` draws a command's time (an operator or remote function: ``#``)."""

WIDTH = 72
"""The most characters `display` gives a stream's bar."""


class Timeline(Delivery):
    """When each command of each stream of each proc starts and ends."""

    def __init__(self) -> None:
        self.clocks: dict[tuple[int, int], float] = defaultdict(float)
        self.busy: dict[tuple[int, int], list[tuple[float, float, int]]] = defaultdict(list)
        self._signals: dict[tuple[int, int], float] = {}
        self._groups: dict[int, tuple[tuple[int, ...], ...]] = {}

    def setup(self, command: tuple[Any, ...]) -> None:
        if command[0] == commands.GROUPS:
            self._groups[command[1]] = command[2]

    def send(self, shape: Shape, batch: int, segments: Segments) -> None:
        ranks = shape.ranks()
        for sid, batch in segments:
            for command in batch:
                self._time(ranks, sid, command)

    send_to_live = send

    @property
    def workers(self) -> Any:
        raise RuntimeError("a Simulator's mesh has no procs to move tensors to or from")

    def _time(self, ranks: list[int], sid: int, command: tuple[Any, ...]) -> None:
        kind = command[0]
        clocks = self.clocks
        if kind == commands.FETCH or (kind == commands.REMOTE and command[7] is not None):
            raise RuntimeError("a Simulator's mesh runs no code: there are no values to fetch")
        if kind == commands.SIGNAL:
            for rank in ranks:
                self._signals[(rank, command[1])] = clocks[(rank, sid)]
        elif kind == commands.WAIT:
            for rank in ranks:
                here = clocks[(rank, sid)]
                clocks[(rank, sid)] = max(here, self._signals.get((rank, command[1]), here))
        elif kind == commands.REDUCE:
            for group in self._groups[command[1]]:
                members = [rank for rank in group if rank in ranks]
                start = max(clocks[(rank, sid)] for rank in members)
                for rank in members:
                    self._run(rank, sid, start, kind)
        elif kind in COSTS:
            for rank in ranks:
                self._run(rank, sid, clocks[(rank, sid)], kind)

    def _run(self, rank: int, sid: int, start: float, kind: int) -> None:
        end = start + COSTS[kind]
        self.busy[(rank, sid)].append((start, end, kind))
        self.clocks[(rank, sid)] = end


class Simulator:
    """A mesh of ``hosts`` by ``gpus`` simulated procs (dimensions ``host`` and ``gpu``).

    ``trace_mode`` is accepted for Monarch's sake; the streams are always drawn.
    """

    def __init__(self, hosts: int = 1, gpus: int = 1, trace_mode: str = "stream_only") -> None:
        runtime = context().actor_instance.runtime
        mesh_id = runtime.new_id()
        host_mesh = HostMesh(
            [f"{mesh_id}.host{h}" for h in range(hosts)],
            Shape.from_extent(Extent(["host"], [hosts])),
        )
        shape = Shape.from_extent(Extent(["host", "gpu"], [hosts, gpus]))
        procs = [f"{mesh_id}.{i}" for i in range(hosts * gpus)]
        self.mesh = ProcMesh(mesh_id, procs, shape, host_mesh)
        self.trace_mode = trace_mode
        self._timeline = Timeline()
        self._engine = Engine(runtime, self.mesh, self._timeline)
        register(runtime, self._engine)

    def display(self) -> None:
        """Print each proc's streams: ``#`` an operator, ``=`` a collective, ``<``/``>``
        tensors received and sent, blanks idle time."""
        print(self.render())

    def render(self) -> str:
        """What `display` prints."""
        self._engine.flush()
        timeline = self._timeline
        end = max((clock for clock in timeline.clocks.values()), default=0.0)
        if not end:
            return "nothing has run on the simulated mesh"
        scale = min(1.0, WIDTH / end)
        names = {sid: stream.name for stream, sid in self._engine.streams().items()}
        lines = [f"simulated time: {end:g} operator units (1 character = {1 / scale:g})"]
        drawn: dict[tuple[str, ...], list[int]] = {}
        for rank in range(len(placement_of(self.mesh).procs)):
            bars = tuple(
                f"  {name:>8} |{self._bar(rank, sid, end, scale)}"
                for sid, name in sorted(names.items())
            )
            drawn.setdefault(bars, []).append(rank)
        for bars, ranks in drawn.items():  # procs whose streams look the same, together
            lines.append(f"proc {ranks[0]}:" if len(ranks) == 1 else f"procs {_spans(ranks)}:")
            lines.extend(bars)
        return "\n".join(lines)

    def _bar(self, rank: int, sid: int, end: float, scale: float) -> str:
        bar = [" "] * (int(end * scale) + 1)
        for start, stop, kind in self._timeline.busy.get((rank, sid), ()):
            first = int(start * scale)
            for column in range(first, max(int(stop * scale), first + 1)):
                bar[column] = MARKS.get(kind, "#")
        return "".join(bar).rstrip()


def _spans(ranks: list[int]) -> str:
    """``0-3, 5``: consecutive ranks as ranges."""
    spans: list[list[int]] = []
    for rank in ranks:
        if spans and rank == spans[-1][1] + 1:
            spans[-1][1] = rank
        else:
            spans.append([rank, rank])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)
