"""The dashboard of a simulated run: the same page, drawn from the run's trace, live or replayed.

`SimSource` runs a program on the simulator (``danaus.sim.run``, by seed) on
a thread of the dashboard's process, and answers the page from the run's
trace: `Replay` folds the events up to a moment of simulated time into the
same `JobView` a real job's controller gathers (procs and their hosts,
actors and their states, messages handled, failures, ended procs). The
page's cursor follows the run while it goes (live), or is moved back and
played again (a replay: the same seed makes the same trace, byte for byte).
Another seed starts another run. What the program prints is kept with the
simulated time it was printed at, prefixed as a real proc's output is.

Nothing here takes part in the run: the dashboard only reads the events the
run appends, so the trace, and its digest, are those of ``danaus.sim.run``.
The simulated procs share the dashboard's process, so they have no threads
or stacks of their own to show, and no CPU or memory figures; mailboxes are
not recorded in a trace, so they show as empty.
"""

from __future__ import annotations

import bisect
import io
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any, TextIO

import msgspec

from danaus.admin.logs import LogBook
from danaus.admin.views import (
    ActorView,
    EndedView,
    FailureView,
    JobView,
    LogsView,
    ProcView,
    ProfileView,
    StacksView,
    TraceView,
)
from danaus.core import config
from danaus.core import trace as ev
from danaus.dashboard.sources import SourceInfo, SourceUnavailable

FRAMES = 200
"""Frames of a run, for counting message rates: each over one frame of simulated time."""
REPLAY_SECONDS = 20.0
"""How long a replay of the whole run takes, in seconds of wall time."""
NO_THREADS = "a simulated proc runs inside the dashboard's own process: it has no threads to show"
STOPPED = "stopped"
"""The reason the simulator gives for a proc that exited cleanly."""


class _Actor(msgspec.Struct):
    mesh_id: str
    name: str
    rank: int
    proc: str
    handled: int = 0


class Replay:
    """A simulated run's state at one moment, folded from its trace events in order."""

    def __init__(self) -> None:
        self.folded = 0
        """How many events are folded in."""
        self.at = 0.0
        self._hosts: dict[str, str] = {}
        self._answering: dict[str, bool] = {}
        """Live procs (not host agents), and whether each answers (False while paused)."""
        self._ended: dict[str, EndedView] = {}
        self._actors: dict[str, _Actor] = {}
        self._placed: dict[tuple[str, str], str] = {}
        """(proc, mesh id) -> the id of the live actor of that mesh there (calls name the mesh)."""
        self._members: dict[tuple[str, int], tuple[str, str]] = {}
        """(mesh id, rank) -> (actor id, proc) of each member spawned."""
        self._failures: dict[tuple[str, str], FailureView] = {}

    def fold(self, events: Sequence[ev.Event], at: float) -> None:
        """Take in the events up to simulated time ``at`` (never earlier than those taken)."""
        while self.folded < len(events) and events[self.folded].t <= at:
            self._take(events[self.folded])
            self.folded += 1
        self.at = max(self.at, at)

    def _take(self, event: ev.Event) -> None:
        if isinstance(event, ev.Boot):
            self._hosts[event.proc] = event.host
            self._ended.pop(event.proc, None)
            if event.proc != event.host:
                self._answering[event.proc] = True
        elif isinstance(event, ev.Down):
            self._down(event)
        elif isinstance(event, (ev.Pause, ev.Resume)) and event.proc in self._answering:
            self._answering[event.proc] = isinstance(event, ev.Resume)
        elif isinstance(event, ev.Spawn):
            name = event.actor.rpartition("/")[2].partition("[")[0]
            self._actors[event.actor] = _Actor(event.mesh, name, event.rank, event.proc)
            self._placed[(event.proc, event.mesh)] = event.actor
            self._members[(event.mesh, event.rank)] = (event.actor, event.proc)
        elif isinstance(event, ev.Stop):
            self._actors.pop(event.actor, None)
        elif isinstance(event, ev.Fail):
            self._fail(event.actor, event.proc, event.cause, event.t, None)
        elif isinstance(event, ev.Failure):
            actor, proc = self._members.get((event.mesh, event.rank), (None, None))
            if actor is not None and proc is not None:
                self._fail(actor, proc, event.cause, event.t, event.rank)
        elif isinstance(event, ev.CallReceived):
            actor = self._actors.get(self._placed.get((event.proc, event.actor), ""))
            if actor is not None:
                actor.handled += 1

    def _down(self, event: ev.Down) -> None:
        proc = event.proc
        self._answering.pop(proc, None)
        host = self._hosts.get(proc)
        if host == proc:
            return
        reason = f"proc {proc} on host {host} {event.reason}"
        state = "stopped" if event.reason == STOPPED else "failed"
        self._ended[proc] = EndedView(proc, host, None, state, reason)
        if state == "failed":
            failure = FailureView(proc, proc, reason, seen=event.t, report=reason)
            self._failures.setdefault((proc, proc), failure)
        for actor_id in [a for a, actor in self._actors.items() if actor.proc == proc]:
            del self._actors[actor_id]

    def _fail(self, actor_id: str, proc: str, cause: str, t: float, rank: int | None) -> None:
        actor = self._actors.pop(actor_id, None)
        if rank is None and actor is not None:
            rank = actor.rank
        name = actor_id.rpartition("/")[2].partition("[")[0]
        report = f"mesh {name!r} rank {rank} ({actor_id}) failed on proc {proc}\n  cause: {cause}"
        failure = FailureView(proc, actor_id, cause, name, rank, t, {}, report)
        self._failures.setdefault((proc, actor_id), failure)

    def view(self, seed: int) -> JobView:
        """The run at the folded moment, as a controller's snapshot."""
        actors: dict[str, list[ActorView]] = {}
        for actor_id, actor in self._actors.items():
            actors.setdefault(actor.proc, []).append(
                ActorView(
                    actor_id=actor_id,
                    mesh_id=actor.mesh_id,
                    mesh=actor.name,
                    rank=actor.rank,
                    coords={},
                    class_name="",
                    state="running",
                    mailbox=0,
                    handled=actor.handled,
                    running=None,
                )
            )
        procs = [
            ProcView(
                proc_id=proc,
                host=self._hosts.get(proc, ""),
                actors=actors.get(proc, []),
                answered=answering,
            )
            for proc, answering in self._answering.items()
        ]
        failures = sorted(self._failures.values(), key=lambda f: f.seen, reverse=True)
        return JobView(
            pid=seed,
            transport="sim",
            at=self.at,
            gather_seconds=0.0,
            procs=procs,
            failures=failures,
            sessions=[],
            ended=list(self._ended.values()),
        )


class SimStatus(msgspec.Struct, frozen=True):
    """Where a simulated run and the page's cursor are."""

    target: str
    seed: int
    hosts: int
    running: bool
    """The program still runs."""
    end: float
    """Simulated time of the run's latest event."""
    at: float
    """The page's cursor, in simulated seconds."""
    following: bool
    """The cursor follows the run's latest event."""
    playing: bool
    events: int
    digest: str | None
    """The trace's digest, once the run is over."""
    value: str | None
    error: str | None


class _Output(io.TextIOBase):
    """A text stream into a `LogBook` (standard output's lines, already prefixed)."""

    def __init__(self, book: LogBook) -> None:
        self._book = book

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self._book.write(1, text)
        return len(text)

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return "utf-8"


class _ByThread(io.TextIOBase):
    """Standard output while a run goes: the run's thread writes to ``run``, every other one
    (the dashboard's own messages) to ``others``, the standard output it replaced."""

    def __init__(self, run: TextIO, others: TextIO) -> None:
        self.run = run
        self.others = others
        self.thread = threading.get_ident()

    def writable(self) -> bool:
        return True

    def _stream(self) -> TextIO:
        return self.run if threading.get_ident() == self.thread else self.others

    def write(self, text: str) -> int:
        return self._stream().write(text)

    def flush(self) -> None:
        self._stream().flush()

    def fileno(self) -> int:
        return self.others.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return self.others.encoding


class _Run:
    """One simulated run of the program, on a thread of its own."""

    def __init__(self, main: Callable[[], Any], hosts: int, seed: int) -> None:
        self.seed = seed
        self.logs = LogBook(clock=self.now)
        self.events: list[ev.Event] | None = None
        """The whole trace, once the run is over."""
        self.digest: str | None = None
        self.value: str | None = None
        self.error: str | None = None
        self._thread = threading.Thread(
            target=self._run, args=(main, hosts), name=f"danaus-sim-seed{seed}", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def now(self) -> float:
        """The run's simulated time (0 before it starts and after it ends)."""
        world = config.installed()
        return world.trace.clock() if world is not None else 0.0

    def trace(self) -> Sequence[ev.Event]:
        """The events so far: the running world's (the only one in this process), or the whole."""
        if self.events is not None:
            return self.events
        world = config.installed()
        return world.trace.events if world is not None else []

    def _run(self, main: Callable[[], Any], hosts: int) -> None:
        from danaus.sim import run
        from danaus.transports.tcp.output import PrefixedStream

        prefixed = PrefixedStream(_Output(self.logs), "proc root")  # type: ignore[arg-type]
        output = _ByThread(prefixed, sys.stdout)
        sys.stdout = output
        try:
            result = run(main, hosts=hosts, seed=self.seed)
        except BaseException:
            self.error = traceback.format_exc()
            self.events = []
            return
        finally:
            if sys.stdout is output:
                sys.stdout = output.others
        self.value = repr(result.value)
        self.digest = result.digest
        self.events = result.trace.events

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)


class SimSource:
    """A program on the simulator, run by seed; the page's cursor on its trace (see module).

    Two replays follow the cursor: one at it, one a frame behind, so that
    message rates are counted over the frame before the cursor, wherever it is.
    """

    def __init__(
        self,
        main: Callable[[], Any],
        target: str,
        hosts: int,
        seed: int,
        replay_seconds: float = REPLAY_SECONDS,
    ) -> None:
        self.main = main
        self.target = target
        self.hosts = hosts
        self.replay_seconds = replay_seconds
        self.epoch = 0
        """Changes whenever what the page shows goes back in time: a rewind, or a new run."""
        self._run: _Run | None = None
        self._now = Replay()
        self._behind = Replay()
        self._at = 0.0
        self._following = True
        self._playing = False
        self._played_at = 0.0
        """When the cursor last moved on by itself (wall clock, `time.monotonic`)."""
        self.start(seed)

    def start(self, seed: int) -> None:
        """Run the program with ``seed`` (once the run before has finished)."""
        if self._run is not None and self._run.running:
            raise SourceUnavailable(f"the run of seed {self._run.seed} has not finished yet")
        self._run = _Run(self.main, self.hosts, seed)
        self._rewind(0.0)
        self._following = True
        self._playing = False
        self._run.start()

    def _rewind(self, at: float) -> None:
        self._now = Replay()
        self._behind = Replay()
        self._at = at
        self.epoch += 1

    @property
    def run(self) -> _Run:
        assert self._run is not None
        return self._run

    def _end(self) -> float:
        events = self.run.trace()
        return events[-1].t if events else 0.0

    def _frame(self) -> float:
        return max(self._end() / FRAMES, 1e-9)

    def seek(self, at: float) -> None:
        """Put the cursor at simulated time ``at`` (and stop following the run)."""
        self._following = False
        self._playing = False
        at = max(0.0, min(at, self._end()))
        if at < self._at:
            self._rewind(at)
        self._at = at

    def play(self) -> None:
        """Move the cursor on by itself (`tick`), from the start if it is at the end."""
        self._following = False
        if self._at >= self._end():
            self._rewind(0.0)
        self._playing = True
        self._played_at = time.monotonic()

    def pause(self) -> None:
        self._playing = False
        self._following = False

    def follow(self) -> None:
        self._following = True
        self._playing = False

    def tick(self) -> None:
        """Before each view: follow the run, or play on as much as wall time went by."""
        end = self._end()
        if self._following:
            self._at = end
        elif self._playing:
            now = time.monotonic()
            step = end * (now - self._played_at) / self.replay_seconds
            self._played_at = now
            self._at = min(end, self._at + step)
            if self._at >= end and not self.run.running:
                self._playing = False

    def status(self) -> SimStatus:
        run = self.run
        return SimStatus(
            target=self.target,
            seed=run.seed,
            hosts=self.hosts,
            running=run.running,
            end=self._end(),
            at=self._at,
            following=self._following,
            playing=self._playing,
            events=len(run.trace()),
            digest=run.digest,
            value=run.value,
            error=run.error,
        )

    def describe(self) -> SourceInfo:
        return SourceInfo(
            kind="simulation",
            title=f"simulation of {self.target}",
            details={"hosts": str(self.hosts), "transport": "sim"},
            stacks=False,
        )

    async def snapshot(self) -> JobView:
        events = self.run.trace()
        self._now.fold(events, self._at)
        return self._now.view(self.run.seed)

    async def before(self) -> JobView:
        """The run one frame before the cursor: message rates are counted over that frame."""
        self._behind.fold(self.run.trace(), max(0.0, self._at - self._frame()))
        return self._behind.view(self.run.seed)

    async def logs(self, after: int) -> LogsView:
        found = self.run.logs.after(after)
        lines = [line for line in found.lines if line.at <= self._at]
        newest = lines[-1].seq if lines else after
        return LogsView(lines=lines, newest=newest, skipped=found.skipped)

    async def stacks(self, proc: str) -> StacksView:
        raise SourceUnavailable(NO_THREADS)

    async def profile(self, proc: str, seconds: float, hz: float) -> ProfileView:
        raise SourceUnavailable(NO_THREADS)

    async def trace(self) -> TraceView:
        events = self.run.trace()
        cut = bisect.bisect_right(events, self._at, hi=len(events), key=lambda e: e.t)
        return TraceView(recording=True, events=list(events[:cut]))

    def close(self) -> None:
        if self._run is not None:
            self._run.join(1.0)
