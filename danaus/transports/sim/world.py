"""The simulated cluster: hosts, procs, network and launcher in one OS process."""

from __future__ import annotations

import asyncio
import inspect
import logging
import math
import random
import signal
import weakref
from collections.abc import Iterable, Sequence
from typing import Any, NoReturn

import simpy

from danaus.core import config
from danaus.core import trace as ev
from danaus.core.agents import HOST_AGENT, PROC_AGENT, HostAgent, ProcAgent
from danaus.core.blocking import GreenletRunner
from danaus.core.context import peek_context
from danaus.core.faults import Faults, Heal
from danaus.core.names import NumberedNames
from danaus.core.owned import STOP_TIMEOUT
from danaus.core.runtime import Runtime, cancel_leftover_tasks
from danaus.core.serialize import loads
from danaus.core.trace import Trace
from danaus.core.transport import ROOT, ActorRunner, Launcher, ProcSpec, World
from danaus.core.waits import describe_waits
from danaus.transports.sim.loop import VirtualTimeLoop
from danaus.transports.sim.network import LIVE, NetworkModel, SimNetwork

log = logging.getLogger("danaus.sim")

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
            if spec.setup is not None:
                result = loads(spec.setup)()
                if inspect.isawaitable(result):
                    await result
            self.world.boot(spec.proc_id, spec.host)

    async def stop(self, procs: Sequence[str], timeout: float) -> None:
        for proc in procs:
            self.world.halt(proc)


class SimFaults(Faults):
    """Every fault, applied exactly on the simulated network and procs."""

    controls_network = True

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

    def delay(self, a: str, b: str, seconds: float) -> Heal:
        return _all(self._network.delay(src, dst, seconds) for src, dst in ((a, b), (b, a)))

    def clog(self, a: str, b: str) -> Heal:
        return _all(self._network.hold(src, dst) for src, dst in ((a, b), (b, a)))

    def partition(self, side: Sequence[str], other: Sequence[str], one_way: bool) -> Heal:
        pairs = [(a, b) for a in side for b in other if a != b]
        if not one_way:
            pairs += [(b, a) for a, b in pairs]
        return _all(self._network.hold(src, dst) for src, dst in pairs)


def _all(heals: Iterable[Heal]) -> Heal:
    """One heal for several faults, undone in the order they were made."""
    done = list(heals)

    def heal() -> None:
        for each in done:
            each()

    return heal


class SimWorld(World):
    """Hosts ``h0``..``h{n-1}``, each with a host agent proc; the controller is ``root`` on ``h0``.

    While the world runs, the global `random` module is seeded with ``seed``, so
    user code that draws from it replays exactly; its previous state comes back
    at shutdown.
    """

    name = "sim"
    deterministic = True
    max_procs_per_host = 1_000_000

    def __init__(
        self,
        hosts: int = 1,
        seed: int = 0,
        network: NetworkModel | None = None,
        time_limit: float = math.inf,
    ) -> None:
        if not isinstance(hosts, int) or isinstance(hosts, bool) or hosts < 1:
            raise ValueError(f"hosts must be a positive int, got {hosts!r}")
        self.seed = seed
        self.env = simpy.Environment()
        self.loop = VirtualTimeLoop(self.env)
        self.loop.before_close = self.shutdown
        self.loop.time_limit = time_limit
        self.loop.describe_stall = self._describe_stall
        self.trace = Trace(self.loop.time)
        self.rng = random.Random(seed)
        self._global_random = random.getstate()
        random.seed(seed)
        self.network = SimNetwork(
            self.env,
            self.loop,
            network or NetworkModel(),
            random.Random(self.rng.random()),
            self.trace,
        )
        self.random = random.Random(self.rng.random())
        self.network.on_silent = self._silent
        self.faults = SimFaults(self)
        self._aborted = False
        self.launcher = SimLauncher(self)
        self.procs: dict[str, Runtime] = {}
        self._tasks: dict[str, weakref.WeakSet[asyncio.Task[Any]]] = {}
        self.loop.set_task_factory(self._make_task)
        self._runner = GreenletRunner(self.loop)
        self._hosts = NumberedNames("h", hosts)
        self._hosts_set = frozenset(self._hosts)
        self._closed = False
        for host in self._hosts:
            self.network.add_host(host)
            self.boot(host, host, {HOST_AGENT: HostAgent})
        self._root = self.boot(ROOT, self._hosts[0])
        self.network.controller_host = self._hosts[0]

    @property
    def root(self) -> Runtime:
        return self._root

    def local_runtimes(self) -> list[Runtime]:
        return list(self.procs.values())

    def hosts(self) -> Sequence[str]:
        return self._hosts

    def actor_runner(self, name: str) -> ActorRunner:
        return self._runner

    def boot(self, proc: str, host: str, extra: dict[str, type] | None = None) -> Runtime:
        """Start proc ``proc`` on ``host`` now."""
        transport = self.network.attach(proc, host)
        runtime = Runtime(self, proc, host, host, transport)
        agents = {PROC_AGENT: ProcAgent, **(extra or {})}
        runtime.start({key: cls(runtime) for key, cls in agents.items()})
        self.procs[proc] = runtime
        self.network.up(proc)
        self.trace.record(ev.Boot(proc=proc, host=host))
        return runtime

    def halt(self, proc: str) -> None:
        """End proc ``proc`` (its actors were stopped first, or are abandoned)."""
        runtime = self.procs.pop(proc, None)
        if runtime is not None:
            runtime.close()

    def crash(self, proc: str, reason: str, **details: Any) -> None:
        """``proc`` dies at once: no cleanup, all its tasks end, its watchers learn of it."""
        if proc == ROOT:
            raise RuntimeError("the simulated controller cannot crash; end the program instead")
        self.network.down(proc, reason, **details)
        self.halt(proc)
        for task in list(self._tasks.pop(proc, ())):
            task.cancel()

    def _make_task(self, loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> Any:
        """Every task remembers the proc whose code started it, so a crash can end them all."""
        task = asyncio.Task(coro, loop=loop, **kwargs)
        ctx = peek_context()
        if ctx is not None:
            proc = ctx.actor_instance._runtime.proc_id
            self._tasks.setdefault(proc, weakref.WeakSet()).add(task)
        return task

    def worker_procs(self, host: str) -> list[str]:
        return sorted(
            proc
            for proc, endpoint in self.network.endpoints.items()
            if endpoint.host == host
            and endpoint.state in LIVE
            and proc != ROOT
            and proc not in self._hosts_set
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

    def finish_main(self) -> None:
        """``asyncio.run``'s main returned: stop everything, leaving the loop for it to close."""
        self.shutdown(close_loop=False)
        if config.installed() is self:
            config.install(None)

    def shutdown(self, close_loop: bool = True) -> None:
        if self._closed:
            return
        if self.loop.is_running():
            raise RuntimeError("shut the simulator down from outside its event loop")
        self._closed = True
        self.loop.time_limit = self.env.now + SHUTDOWN_TIME
        if not self._aborted:
            try:
                self.loop.run_until_complete(self._root.client.stop_owned())
            except Exception:
                log.exception("stopping the simulated meshes failed")
        for proc in list(self.procs):
            self.halt(proc)
        self.loop.time_limit = math.inf
        self.loop.run_until_complete(cancel_leftover_tasks())
        self.loop.before_close = None
        random.setstate(self._global_random)
        if close_loop:
            self.loop.close()
