"""The simulated cluster: hosts, procs, network and launcher in one OS process."""

from __future__ import annotations

import asyncio
import logging
import math
import os
import random
import signal
import weakref
from collections.abc import Sequence
from typing import Any, NoReturn

import simpy

from danaus.core import config
from danaus.core.agents import HOST_AGENT, PROC_AGENT, HostAgent, ProcAgent
from danaus.core.blocking import GreenletRunner
from danaus.core.context import peek_context
from danaus.core.mesh import STOP_TIMEOUT
from danaus.core.runtime import Runtime, cancel_leftover_tasks
from danaus.core.trace import Trace
from danaus.transports.base import Fault, Launcher, NumberedNames, ProcSpec, SyncRunner, World
from danaus.transports.sim.loop import VirtualTimeLoop
from danaus.transports.sim.network import NetworkModel, SimNetwork

log = logging.getLogger("danaus.sim")

ROOT = "root"
SHUTDOWN_TIME = 3 * STOP_TIMEOUT
"""Simulated seconds a shutdown may spend stopping meshes gracefully before it halts them."""


class SimLauncher(Launcher):
    """Boots simulated procs after the model's spawn time; stops them on request."""

    def __init__(self, world: SimWorld) -> None:
        self.world = world

    async def launch(self, specs: Sequence[ProcSpec]) -> None:
        await asyncio.sleep(self.world.network.model.spawn_time)
        for spec in specs:
            self.world.boot(spec.proc_id, spec.host)

    async def stop(self, procs: Sequence[str], timeout: float) -> None:
        for proc in procs:
            self.world.halt(proc)


class SimWorld(World):
    """Hosts ``h0``..``h{n-1}``, each with a host agent proc; the controller is ``root`` on ``h0``.

    The global `random` module is seeded with ``seed`` too, so user code that
    draws from it replays exactly.
    """

    name = "sim"
    deterministic = True

    def __init__(self, hosts: int = 1, seed: int = 0, network: NetworkModel | None = None) -> None:
        if not isinstance(hosts, int) or hosts < 1:
            raise ValueError(f"hosts must be a positive int, got {hosts!r}")
        self.seed = seed
        self.env = simpy.Environment()
        self.loop = VirtualTimeLoop(self.env)
        self.loop.before_close = self.shutdown
        self.trace = Trace(self.loop.time)
        self.rng = random.Random(seed)
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
        self._aborted = False
        self._real_exit = os._exit
        os._exit = self._exit
        self.launcher = SimLauncher(self)
        self.procs: dict[str, Runtime] = {}
        self._tasks: dict[str, weakref.WeakSet[asyncio.Task[Any]]] = {}
        self.loop.set_task_factory(self._make_task)
        self._runner = GreenletRunner()
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

    def sync_runner(self) -> SyncRunner:
        return self._runner

    def boot(self, proc: str, host: str, extra: dict[str, type] | None = None) -> Runtime:
        """Start proc ``proc`` on ``host`` now."""
        transport = self.network.attach(proc, host)
        runtime = Runtime(self, proc, host, host, transport)
        agents = {PROC_AGENT: ProcAgent, **(extra or {})}
        runtime.start({key: cls(runtime) for key, cls in agents.items()})
        self.procs[proc] = runtime
        self.network.up(proc)
        self.trace.record("boot", proc, host=host)
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

    def inject(self, fault: Fault, proc: str) -> None:
        if fault == "crash":
            self.crash(proc, "was killed", signal=signal.SIGKILL)
        elif fault == "pause":
            self.network.pause(proc)
        elif fault == "resume":
            self.network.resume(proc)
        else:
            raise ValueError(f"unknown fault {fault!r}")

    def worker_procs(self, host: str) -> list[str]:
        return sorted(
            proc
            for proc, endpoint in self.network.endpoints.items()
            if endpoint.host == host
            and endpoint.state in ("up", "paused")
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

    def _exit(self, code: int) -> None:
        """``os._exit`` while this world runs: inside a simulated actor it ends only that proc."""
        ctx = peek_context()
        runtime = ctx.actor_instance._runtime if ctx is not None else None
        if runtime is not None and runtime.world is self and runtime.proc_id != ROOT:
            raise SystemExit(code)
        self._real_exit(code)

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
        os._exit = self._real_exit
        if close_loop:
            self.loop.close()
