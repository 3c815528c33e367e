"""The simulated cluster: hosts, procs, network and launcher in one OS process."""

from __future__ import annotations

import asyncio
import inspect
import logging
import math
import os
import random
import signal
import threading
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import msgspec

from danaus.core import config
from danaus.core import trace as ev
from danaus.core.blocking import GreenletRunner, cancel_leftover_tasks
from danaus.core.context import peek_context
from danaus.core.faults import Faults, Heal, healing_all
from danaus.core.names import NumberedNames
from danaus.core.owned import STOP_TIMEOUT
from danaus.core.runtime import Runtime
from danaus.core.serialize import Buffer, loads
from danaus.core.settings import Settings
from danaus.core.trace import Trace
from danaus.core.transport import ROOT, ActorRunner, Launcher, ProcSpec, World
from danaus.core.waits import describe_waits
from danaus.transports.sim import clocks, outside_waits, process_end
from danaus.transports.sim.collector import CollectorTuning
from danaus.transports.sim.decoded import DecodedOnce
from danaus.transports.sim.loop import Handle, VirtualTimeLoop
from danaus.transports.sim.network import LIVE, NetworkModel, SimNetwork
from danaus.transports.sim.schedule import Exploration, owner_of
from danaus.transports.sim.task_refs import TaskRefs
from danaus.transports.sim.threads import StoppedThreads
from danaus.transports.sim.timeline import Timeline

log = logging.getLogger("danaus.sim")

T = TypeVar("T")

PROCS_PER_HOST = 1_000_000
"""The procs a simulated host runs at most: as many as it is asked to, in practice."""

FIRST_PID = 2**22 + 1
"""The pid of the first simulated proc: above Linux's largest (PID_MAX_LIMIT), so that no real
process has it (`process_end`)."""

SHUTDOWN_TIME = 3 * STOP_TIMEOUT
"""Simulated seconds a shutdown may spend stopping meshes gracefully before it halts them."""


class SimLauncher(Launcher):
    """Boots simulated procs after the model's spawn time; stops them on request."""

    def __init__(self, world: SimWorld) -> None:
        self.world = world

    async def launch(self, specs: Sequence[ProcSpec]) -> None:
        """Boot the procs; each runs its ``bootstrap`` function (in this one OS process) first."""
        if any(spec.command is not None for spec in specs):
            why = "the simulator runs every proc in one OS process: bootstrap_command needs a "
            why += "real transport"
            for spec in specs:
                self.world.network.attach(spec.proc_id, spec.host)
                self.world.network.down(spec.proc_id, f"could not be started ({why})")
            raise NotImplementedError(why)
        await asyncio.sleep(self.world.network.model.spawn_time)
        for spec in specs:
            self.world.assign_pid(spec.proc_id)
            if spec.setup is not None:
                with process_end.running_as(self.world, spec.proc_id):
                    result = loads(spec.setup)()
                    if inspect.isawaitable(result):
                        await result
            self.world.boot(spec.proc_id, spec.host)

    async def stop(self, procs: Sequence[str], timeout: float) -> None:
        for proc in procs:
            self.world.halt(proc)


class SimFaults(Faults):
    """Every fault, applied exactly on the simulated network and procs."""

    network_faults = frozenset(("slow", "bandwidth", "delay", "clog", "partition", "isolate"))
    timing_faults = frozenset(("clock_jump", "slow_cpu", "pause_thread"))

    def __init__(self, world: SimWorld) -> None:
        self._world = world
        self._network = world.network

    def workers(self, host: str) -> list[str]:
        return self._world.worker_procs(host)

    def crash(self, proc: str) -> None:
        self._world.crash(proc, "was killed", signal=signal.SIGKILL)

    def pause(self, proc: str) -> Heal:
        return self._network.pause(proc)

    def resume(self, proc: str) -> None:
        self._network.resume(proc)

    def slow(self, proc: str, seconds: float) -> Heal:
        return self._network.slow(proc, seconds)

    def bandwidth(self, host: str, factor: float) -> Heal:
        return self._network.bandwidth(host, factor)

    def clock_jump(self, proc: str, seconds: float) -> Heal:
        return self._world.clocks.jump(proc, seconds)

    def slow_cpu(self, proc: str, factor: float) -> Heal:
        return self._network.slow_cpu(proc, factor)

    def pause_thread(self, proc: str, actor: int) -> Heal:
        return self._world.threads.stop(proc, actor)

    def delay(self, a: str, b: str, seconds: float) -> Heal:
        return healing_all(self._network.delay(src, dst, seconds) for src, dst in ((a, b), (b, a)))

    def clog(self, a: str, b: str) -> Heal:
        return healing_all(self._network.hold(src, dst) for src, dst in ((a, b), (b, a)))

    def partition(self, side: Sequence[str], other: Sequence[str], one_way: bool) -> Heal:
        pairs = [(a, b) for a in side for b in other if a != b]
        if not one_way:
            pairs += [(b, a) for a, b in pairs]
        return healing_all(self._network.hold(src, dst) for src, dst in pairs)

    def isolate(self, host: str) -> Heal:
        """Cut ``host`` off from the other hosts (the controller stays with ``h0``)."""
        return self.partition([host], [h for h in self._world.hosts() if h != host], False)


def _steps_task(handle: Handle, which: Callable[[asyncio.Task[Any]], bool]) -> bool:
    """Whether ``handle`` steps or wakes a task for which ``which(task)`` holds."""
    task = getattr(handle._callback, "__self__", None)
    return isinstance(task, asyncio.Task) and which(task)


def _is_danaus_coroutine(coro: Any) -> bool:
    """Whether ``coro`` is Danaus's own code (a runtime task) rather than the program's."""
    frame = getattr(coro, "cr_frame", None)
    return frame is not None and frame.f_globals.get("__name__", "").startswith("danaus.")


class SimWorld(World):
    """Hosts ``h0``..``h{n-1}``, each with a host agent proc; the controller is ``root`` on ``h0``.

    While the world runs, the global `random` module is seeded with ``seed``, so
    user code that draws from it replays exactly, and the garbage collector
    runs less often (`collector`); both are as they were again after shutdown.
    Waits outside Danaus on its thread run it on virtual time (`outside_waits`),
    an actor that ends its own process ends only its proc (`process_end`), and
    the code of each proc reads its own clocks (`clocks`).
    The settings it is made from (`Settings`) give its ``hosts``, ``seed``,
    ``network`` and ``time_limit``; ``schedule_seed`` picks the interleaving
    explored (`schedule`), 0 perturbing nothing; with ``trace_dir``, the world
    writes its trace there at shutdown. Of the job's options it applies
    ``cast_fanout`` and ``max_message_bytes`` (None: no limit), which bounds the
    payload of every message as on the real transports; a simulated host runs as
    many procs as it is asked to.
    """

    name = "sim"
    deterministic = True
    procs_in_process = True

    def __init__(self, settings: Settings) -> None:
        self.options = msgspec.structs.replace(
            settings.job_options(), max_procs_per_host=PROCS_PER_HOST
        )
        self.seed = seed = settings.seed
        self.schedule_seed = settings.schedule_seed
        self._trace_dir = settings.trace_dir
        self.thread = threading.get_ident()
        self.timeline = Timeline()
        self.loop = VirtualTimeLoop(self.timeline)
        self.loop.keep_open = self._has_procs
        self.loop.before_close = self._loop_closing
        self.loop.closes_asyncgen = lambda _: peek_context() is None
        self.loop.time_limit = settings.time_limit
        self.loop.describe_stall = self._describe_stall
        # The trace reads the clock for every event it records, a few per message:
        # reading the attribute through `partial` and `getattr` runs no Python frame.
        self.trace = Trace(partial(getattr, self.timeline, "now"))
        self.rng = random.Random(seed)
        self._global_random = random.getstate()
        random.seed(seed)
        self._collector = CollectorTuning()
        self.network = SimNetwork(
            self.timeline,
            self.loop,
            settings.network or NetworkModel(),
            random.Random(self.rng.random()),
            self.trace,
        )
        self.random = random.Random(self.rng.random())
        self.network.on_silent = self._silent
        if self.schedule_seed:
            exploration = Exploration(self.schedule_seed)
            self.loop.schedule = exploration
            self.network.extra_delay = exploration.delay
        self.clocks = clocks.ProcClocks(self.timeline)
        self.threads = StoppedThreads(self)
        self.faults = SimFaults(self)
        self._aborted = False
        self.launcher = SimLauncher(self)
        self.procs: dict[str, Runtime] = {}
        self._pids: dict[str, int] = {}
        self._pid_procs: dict[int, str] = {}
        self._tasks: dict[str, TaskRefs] = {}
        self._cluster_tasks = TaskRefs()
        self.loop.set_task_factory(self._make_task)
        self._runner = GreenletRunner(self.loop)
        self._decoded = DecodedOnce()
        self._hosts = NumberedNames("h", settings.hosts)
        self._hosts_set = frozenset(self._hosts)
        self._closed = False
        for host in self._hosts:
            self.network.add_host(host)
            self.boot(host, host, host_agent=True)
        self._root = self.boot(ROOT, self._hosts[0])
        self.network.controller_host = self._hosts[0]
        outside_waits.attach(self)
        process_end.attach(self)
        clocks.attach(self)

    @property
    def root(self) -> Runtime:
        return self._root

    def local_runtimes(self) -> list[Runtime]:
        return list(self.procs.values())

    def is_local(self, proc: str) -> bool:
        return proc in self.procs

    def hosts(self) -> Sequence[str]:
        return self._hosts

    def actor_runner(self, name: str) -> ActorRunner:
        return self._runner

    def decode_shared(
        self, frames: Sequence[Buffer], decode: Callable[[Sequence[Buffer]], tuple[T, bool]]
    ) -> T:
        return self._decoded.decode(frames, decode)

    def boot(self, proc: str, host: str, host_agent: bool = False) -> Runtime:
        """Start proc ``proc`` on ``host`` now (``host_agent``: it is the host's agent)."""
        transport = self.network.attach(proc, host)
        runtime = Runtime(self, proc, host, host, transport)
        runtime.start(host_agent)
        self.procs[proc] = runtime
        if proc != ROOT and proc not in self._pids:  # the controller's code sees its own pid
            self.assign_pid(proc)
        self.network.up(proc)
        self.trace.record(ev.Boot(proc=proc, host=host))
        return runtime

    def assign_pid(self, proc: str) -> None:
        """Give ``proc`` its pid: the next one, in the order procs start."""
        pid = FIRST_PID + len(self._pid_procs)
        self._pids[proc], self._pid_procs[pid] = pid, proc

    def pid_of(self, proc: str) -> int:
        """The pid that code in simulated proc ``proc`` sees (`process_end`): one of its own."""
        return self._pids[proc]

    def proc_of_pid(self, pid: int) -> str | None:
        """The simulated proc whose pid is ``pid``, if one has it."""
        return self._pid_procs.get(pid)

    def halt(self, proc: str) -> None:
        """End proc ``proc`` (its actors were stopped first, or are abandoned)."""
        runtime = self.procs.pop(proc, None)
        self.threads.proc_ended(proc)
        if runtime is not None:
            runtime.close()

    def crash(self, proc: str, reason: str, **details: Any) -> None:
        """``proc`` dies at once: no cleanup, all its tasks end, its watchers learn of it."""
        if proc == ROOT:
            raise RuntimeError("the simulated controller cannot crash; end the program instead")
        self.network.down(proc, reason, **details)
        self.halt(proc)
        tasks = self._tasks.pop(proc, None)
        for task in tasks.tasks() if tasks is not None else ():
            task.cancel()

    def _make_task(self, loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> Any:
        """Every task remembers the proc whose code started it, so a crash can end them all.

        Tasks of the simulated cluster (started by an actor, or by Danaus itself)
        are hidden from ``asyncio.all_tasks()``, as they would live on other
        threads and processes on a real transport: so the end of an
        ``asyncio.run`` or an ``asyncio.Runner`` cancels only the controller's
        own tasks. While procs the program spawned live, the loop stays open
        for the world when they close it, so meshes live on until they are
        stopped or the world shuts down.
        """
        task = asyncio.Task(coro, loop=loop, **kwargs)
        ctx = peek_context()
        if ctx is not None:
            proc = ctx.actor_instance.runtime.proc_id
            tasks = self._tasks.get(proc)
            if tasks is None:
                tasks = self._tasks[proc] = TaskRefs()
            tasks.add_task(task)
        if ctx is not None or _is_danaus_coroutine(coro):
            asyncio.tasks._unregister_task(task)
            self._cluster_tasks.add_task(task)
        return task

    def held_while_blocked(self) -> Callable[[Handle], bool]:
        """Which callbacks must wait while the code running now blocks outside Danaus.

        Those of its own actor, or, for the controller's code, those of the
        controller's tasks: on a real transport, they share its blocked thread.
        """
        ctx = peek_context()
        if ctx is not None:
            actor = ctx.actor_instance
            return lambda handle: owner_of(handle) is actor
        return lambda handle: _steps_task(handle, self._is_controller_task)

    def _is_controller_task(self, task: asyncio.Task[Any]) -> bool:
        return not self._cluster_tasks.holds(task)

    def worker_procs(self, host: str) -> list[str]:
        return sorted(
            proc
            for proc, endpoint in self.network.endpoints_on(host).items()
            if endpoint.state in LIVE and proc != ROOT and proc not in self._hosts_set
        )

    def _silent(self, proc: str) -> None:
        """The failure detector gave up on ``proc``: declare it lost and kill it."""
        if proc == ROOT or proc in self._hosts_set:
            return
        timeout = self.network.model.heartbeat_timeout
        self.crash(proc, f"stopped answering heartbeats for {timeout:g} s")

    def exit_proc(self, runtime: Runtime, code: int) -> None:
        self.crash(runtime.proc_id, "exited", exit_code=code)

    def abort(self, status: int) -> NoReturn:
        self._aborted = True
        raise SystemExit(status)

    def _describe_stall(self) -> str:
        return describe_waits(self.procs.values())

    def _has_procs(self) -> bool:
        """Whether a proc spawned by the program still lives (then the world outlives its loop's
        ``asyncio.run`` or ``Runner``, as a real cluster would)."""
        return not self._closed and any(
            proc != ROOT and proc not in self._hosts_set for proc in self.procs
        )

    def _loop_closing(self) -> None:
        """The loop is being closed and no proc of the program lives: shut down, and be forgotten.

        The next use of Danaus makes a new world.
        """
        self.shutdown(close_loop=False)
        if config.installed() is self:
            config.install(None)

    def _stop_everything(self) -> None:
        """Stop the meshes gracefully (for a while), then halt every proc and end every task."""
        self.loop.time_limit = self.timeline.now + SHUTDOWN_TIME
        if not self._aborted:
            try:
                self.loop.run_until_complete(self._root.client.stop_owned())
            except Exception:
                log.exception("stopping the simulated meshes failed")
        for proc in list(self.procs):
            self.halt(proc)
        self.loop.time_limit = math.inf
        for task in self._cluster_tasks.tasks():
            asyncio.tasks._register_task(task)  # cancelled below, with every other task left
        self.loop.run_until_complete(cancel_leftover_tasks())

    def _write_trace(self) -> None:
        """Save the trace as JSON lines in the ``trace_dir`` of its settings, if any (for a
        test's report)."""
        if self._trace_dir is None:
            return
        path = Path(self._trace_dir)
        path.mkdir(parents=True, exist_ok=True)
        name = f"seed{self.seed}-schedule{self.schedule_seed}-pid{os.getpid()}"
        taken = len(list(path.glob(f"{name}-*.jsonl")))
        self.trace.write(path / f"{name}-{taken}.jsonl")

    def shutdown(self, close_loop: bool = True) -> None:
        if self._closed:
            return
        if self.loop.is_running():
            raise RuntimeError("shut the simulator down from outside its event loop")
        self._closed = True
        try:
            self._stop_everything()
        finally:
            self.loop.before_close = None
            random.setstate(self._global_random)
            self._collector.restore()
            outside_waits.detach(self)
            process_end.detach(self)
            clocks.detach(self)
        self._write_trace()
        if close_loop:
            self.loop.close()
