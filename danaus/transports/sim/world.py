"""The simulated cluster: hosts, procs, network and launcher in one OS process."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Sequence

import simpy

from danaus.core import config
from danaus.core.agents import HOST_AGENT, PROC_AGENT, HostAgent, ProcAgent
from danaus.core.blocking import GreenletRunner
from danaus.core.runtime import Runtime, cancel_leftover_tasks
from danaus.core.trace import Trace
from danaus.transports.base import Launcher, NumberedNames, ProcSpec, SyncRunner, World
from danaus.transports.sim.loop import VirtualTimeLoop
from danaus.transports.sim.network import NetworkModel, SimNetwork

log = logging.getLogger("danaus.sim")

ROOT = "root"


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
        self.launcher = SimLauncher(self)
        self.procs: dict[str, Runtime] = {}
        self._runner = GreenletRunner()
        self._hosts = NumberedNames("h", hosts)
        for host in self._hosts:
            self.network.add_host(host)
            self.boot(host, host, {HOST_AGENT: HostAgent})
        self._root = self.boot(ROOT, self._hosts[0])
        self._closed = False

    @property
    def root(self) -> Runtime:
        return self._root

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

    def finish_main(self) -> None:
        """``asyncio.run``'s main returned: stop everything, leaving the loop for it to close."""
        self.shutdown(close_loop=False)
        if config.installed() is self:
            config.install(None)

    def shutdown(self, close_loop: bool = True) -> None:
        if self._closed:
            return
        self._closed = True
        if self.loop.is_running():
            raise RuntimeError("shut the simulator down from outside its event loop")
        try:
            self.loop.run_until_complete(self._root.client.stop_owned())
        except Exception:
            log.exception("stopping the simulated meshes failed")
        for proc in list(self.procs):
            self.halt(proc)
        self.loop.run_until_complete(cancel_leftover_tasks())
        self.loop.before_close = None
        if close_loop:
            self.loop.close()
