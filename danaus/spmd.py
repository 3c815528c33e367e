"""torchrun-style SPMD on meshes: torch.distributed's environment on every proc of a mesh.

``setup_torch_elastic_env(procs)`` sets, in every proc of ``procs``, the
environment variables torchrun sets for its workers (``RANK``, ``LOCAL_RANK``,
``WORLD_SIZE``, ``MASTER_ADDR``...), so that actors spawned there afterwards
can call ``torch.distributed.init_process_group()`` as a torchrun script
would. `SPMDActor` does the work on each proc, and can also run a torchrun
script there (``main``). Nothing here imports torch.
"""

from __future__ import annotations

import os
import runpy
import socket
import sys
from typing import Any

from danaus.core.actor import Actor, endpoint
from danaus.core.actor_mesh import placement_of
from danaus.core.context import context
from danaus.core.mesh import ProcMesh

__all__ = ["SPMDActor", "setup_torch_elastic_env", "setup_torch_elastic_env_async"]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        return sock.getsockname()[1]


class SPMDActor(Actor):
    """One per proc of a mesh: knows the proc's place in the job as torchrun counts it.

    ``RANK`` is the proc's rank in the mesh the actor was spawned on and
    ``WORLD_SIZE`` that mesh's size. ``LOCAL_RANK`` and ``LOCAL_WORLD_SIZE``
    count the procs of that mesh on the same host, and ``GROUP_RANK`` and
    ``GROUP_WORLD_SIZE`` the hosts (torchrun's nodes), in mesh order.
    """

    def __init__(self) -> None:
        instance = context().actor_instance
        procs = instance.proc_mesh
        shape = placement_of(procs).shape
        hosts = [placement_of(procs.host_of(base)).procs[0] for base in shape.ranks()]
        self.rank = instance.rank.rank
        mine = hosts[self.rank]
        local = [index for index, host in enumerate(hosts) if host == mine]
        order = list(dict.fromkeys(hosts))
        self.world_size = len(shape)
        self.local_rank = local.index(self.rank)
        self.local_world_size = len(local)
        self.group_rank = order.index(mine)
        self.group_world_size = len(order)
        self.run_id = placement_of(procs).mesh_id

    @endpoint
    def torch_env(self, master_addr: str, master_port: int) -> dict[str, str]:
        """The variables `setup_env` sets on this proc."""
        env = {
            "MASTER_ADDR": master_addr,
            "MASTER_PORT": str(master_port),
            "RANK": str(self.rank),
            "WORLD_SIZE": str(self.world_size),
            "LOCAL_RANK": str(self.local_rank),
            "LOCAL_WORLD_SIZE": str(self.local_world_size),
            "GROUP_RANK": str(self.group_rank),
            "GROUP_WORLD_SIZE": str(self.group_world_size),
            "ROLE_NAME": "default",
            "ROLE_RANK": str(self.rank),
            "ROLE_WORLD_SIZE": str(self.world_size),
            "TORCHELASTIC_RUN_ID": self.run_id,
            "TORCHELASTIC_RESTART_COUNT": "0",
            "TORCHELASTIC_MAX_RESTARTS": "0",
            "TORCHELASTIC_USE_AGENT_STORE": "False",
            "PYTHON_EXEC": sys.executable,
        }
        if self.local_world_size > 1:
            env["OMP_NUM_THREADS"] = os.environ.get("OMP_NUM_THREADS", "1")
        return env

    @endpoint
    def get_host_port(self, use_ipaddr: Any = None) -> tuple[str, int]:
        """This proc's host name (or, with ``use_ipaddr``, its IP address) and a free port."""
        host = socket.gethostname()
        if use_ipaddr is not None:
            host = socket.gethostbyname(host)
        return host, _free_port()

    @endpoint
    def setup_env(self, master_addr: str, master_port: int) -> None:
        """Set torchrun's variables in this proc's environment."""
        self._setup_env(master_addr, master_port)

    @endpoint
    def main(self, master_addr: str, master_port: int, script_args: list[str]) -> bool:
        """Set the variables, then run a torchrun script here: ``["-m", "module", *args]``
        or ``["path.py", *args]``, as ``__main__`` with those ``sys.argv``."""
        self._setup_env(master_addr, master_port)
        if not script_args:
            raise ValueError("no script or module given")
        if script_args[0] == "-m":
            if len(script_args) < 2:
                raise ValueError("-m needs a module name")
            sys.argv = [script_args[1], *script_args[2:]]
            runpy.run_module(script_args[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = list(script_args)
            runpy.run_path(script_args[0], run_name="__main__")
        return True

    def _setup_env(self, master_addr: str, master_port: int) -> None:
        if context().actor_instance.runtime.pid is None:
            raise RuntimeError(
                "the simulator's procs share the controller's process, and so its environment; "
                "torch.distributed needs procs of their own (transport tcp)"
            )
        os.environ.update(self.torch_env(master_addr, master_port))


def _check_master(master_addr: str | None, master_port: int | None) -> None:
    if (master_addr is None) != (master_port is None):
        raise ValueError("give both master_addr and master_port, or neither")
    if context().actor_instance.runtime.pid is None:
        raise RuntimeError(
            "setup_torch_elastic_env needs procs with processes of their own (transport tcp); "
            "the simulator's procs share one process and one environment"
        )


def _spawn(proc_mesh: ProcMesh) -> Any:
    return proc_mesh.spawn("_SPMDActor", SPMDActor)


def _first(actors: Any) -> Any:
    return actors.slice(**dict.fromkeys(placement_of(actors).shape.labels, 0))


def setup_torch_elastic_env(
    proc_mesh: ProcMesh,
    master_addr: str | None = None,
    master_port: int | None = None,
    use_ipaddr: Any = None,
) -> None:
    """Set torchrun's environment variables on every proc of ``proc_mesh`` (blocks until done).

    Without ``master_addr`` and ``master_port``, the first proc of the mesh
    (every coordinate 0) is the master: its host name (its IP address, with
    ``use_ipaddr``) and a port free there. It spawns an `SPMDActor` mesh called
    ``_SPMDActor`` on ``proc_mesh``. On the simulator it raises `RuntimeError`
    (procs there share one process, hence one environment).
    """
    _check_master(master_addr, master_port)
    actors = _spawn(proc_mesh)
    if master_addr is None:
        master_addr, master_port = _first(actors).get_host_port.call_one(use_ipaddr).get()
    actors.setup_env.call(master_addr, master_port).get()


async def setup_torch_elastic_env_async(
    proc_mesh: ProcMesh,
    master_addr: str | None = None,
    master_port: int | None = None,
    use_ipaddr: Any = None,
) -> None:
    """`setup_torch_elastic_env` for async code."""
    _check_master(master_addr, master_port)
    actors = _spawn(proc_mesh)
    if master_addr is None:
        master_addr, master_port = await _first(actors).get_host_port.call_one(use_ipaddr)
    await actors.setup_env.call(master_addr, master_port)
