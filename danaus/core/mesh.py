"""HostMesh and ProcMesh: named multidimensional groups of hosts and of procs.

Spawning procs and actors, and stopping them, are messages to the system
actors (`danaus.core.agent_refs`). The mesh ``spawn``/``spawn_procs`` returns
carries its owner's view (`OwnedMesh`), which this module makes, with the way
the members of each kind of mesh are stopped.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from danaus.core.actor import Actor, endpoints_of
from danaus.core.actor_mesh import RESERVED, ActorMesh, Mesh
from danaus.core.agent_refs import host_agents, proc_agents
from danaus.core.bootstrap import CommandChoice, commands_for, inherited_python, with_python
from danaus.core.config import current_world
from danaus.core.context import context
from danaus.core.endpoint import all_answered, outcomes
from danaus.core.future import CoroutineFuture, Future, no_news_if_unread
from danaus.core.logs import LoggingOptions
from danaus.core.names import NumberedNames
from danaus.core.owned import STOP_TIMEOUT, OwnedMesh
from danaus.core.placement import Placement
from danaus.core.serialize import dumps
from danaus.core.shape import Extent, Shape
from danaus.core.spawn_order import SpawnOrder
from danaus.core.stopped import LostMember, Outcomes, Stopped, skipped
from danaus.core.supervision import RestartPolicy, class_path

if TYPE_CHECKING:
    from danaus.core.instance import Instance

T = TypeVar("T", bound=Actor)
M = TypeVar("M", bound=Mesh)


def _caller() -> Instance:
    return context().actor_instance


class HostMesh(Mesh):
    """Hosts, each with an agent that starts procs on it.

    The host meshes that `this_host` and `hosts` give the controller's code are
    its own: it can `shutdown` them. Slices of them, and host meshes received in
    messages or got inside actors, are references.
    """

    _kind = "host mesh"

    def __init__(
        self,
        agents: Sequence[str],
        shape: Shape,
        owned: OwnedMesh | None = None,
        python: str | None = None,
        *,
        own: bool = False,
    ) -> None:
        name = owned.name if owned is not None else "hosts"
        self._at = Placement("hosts", name, agents, shape, owned)
        self._python = python
        self._own_hosts = own
        self._shut_down = False

    @classmethod
    def single(cls, agent: str, *, own: bool = False, python: str | None = None) -> HostMesh:
        return cls((agent,), Shape.unity(), python=python, own=own)

    @classmethod
    def attached(cls, owner: Instance, agents: Sequence[str], name: str) -> HostMesh:
        """The hosts of workers ``owner`` attached to: its own, to stop or shut down."""
        shape = Shape.from_extent(Extent(["hosts"], [len(agents)]))
        owned = OwnedMesh(
            owner, cls._kind, _release_hosts, mesh_id="hosts", name=name, procs=agents, shape=shape
        )
        return _owned_by(owner, owned, cls(agents, shape, owned))

    def _with_shape(self, shape: Shape) -> HostMesh:
        return HostMesh(self._at.procs, shape, python=self._python)

    def with_python_executable(self, python_executable: str) -> HostMesh:
        """These hosts, spawning procs whose process is ``python_executable`` (a path).

        It runs in place of the controller's interpreter, with the arguments
        and environment a proc's process gets by default, and so must end up
        running a Python that can import Danaus (a wrapper script that sets
        something up and ``exec``s the interpreter, say). A proc started so
        runs ``this_host().spawn_procs(...)`` with the same executable. The
        mesh returned is a reference: ``spawn_procs`` and ``stop`` work on it,
        ``shutdown`` does not. A ``bootstrap_command`` given to ``spawn_procs``
        takes precedence. On the simulator procs are not processes, and such
        procs fail as with a ``bootstrap_command``.
        """
        if not isinstance(python_executable, str) or not python_executable:
            raise TypeError(f"python_executable must be a path, not {python_executable!r}")
        return HostMesh(self._at.procs, self._at.shape, python=python_executable)

    @property
    def is_fake_in_process(self) -> bool:
        """Whether procs spawned here share the caller's OS process (the simulator's do)."""
        return _caller().runtime.world.procs_in_process

    @property
    def initialized(self) -> Future[Any]:
        """Settles when every host's agent answers (for attached hosts: once attached)."""
        owned = self._at.owned
        if owned is not None and owned.initialized is not None:
            return owned.initialized
        return all_answered(proc_agents(self._at).ping)

    def spawn_procs(
        self,
        per_host: dict[str, int] | None = None,
        bootstrap: Any = None,
        name: str | None = None,
        bootstrap_command: CommandChoice = None,
    ) -> ProcMesh:
        """Start ``per_host`` procs on every host: a proc mesh of host dims plus ``per_host`` dims.

        Returns at once; messages to the procs wait until they are up. The mesh's
        ``initialized`` future settles when every proc has started.

        ``bootstrap`` is a function (sync or async) each proc runs before it
        takes messages. ``bootstrap_command`` says how each proc's process
        starts: one `BootstrapCommand`, or a function of the proc's `Point`
        (over the host dims and ``per_host``'s) giving each its own.
        """
        at = self._at
        at.check_usable()
        self._check_not_shut_down()
        extent = Extent.from_dict({} if per_host is None else per_host)
        overlap = set(extent.labels) & set(at.shape.labels)
        if overlap:
            raise ValueError(f"per_host dimensions {sorted(overlap)} are already host dimensions")
        owner = _caller()
        runtime = owner.runtime
        count = extent.nelements
        limit = runtime.world.options.max_procs_per_host
        if count > limit:
            raise ValueError(
                f"spawn_procs asks for {count} procs per host, more than the {limit} a host "
                "may run (max_procs_per_host, a configure() option)"
            )
        if bootstrap is not None and not callable(bootstrap):
            raise TypeError(f"bootstrap must be a function each proc runs, not {bootstrap!r}")
        setup = None if bootstrap is None else dumps(bootstrap, "the bootstrap of spawn_procs")
        shape = Shape.from_extent(
            Extent(at.shape.labels + extent.labels, at.shape.ndslice.sizes + extent.sizes)
        )
        if bootstrap_command is None and self._python is not None:
            bootstrap_command = with_python(runtime.world.default_command(), self._python)
        commands = commands_for(bootstrap_command, shape)
        mesh_id = runtime.new_id()
        name = name or "procs"
        procs = NumberedNames(f"{mesh_id}.", len(self) * count)
        agents = at.members()
        for index, rank in enumerate(at.shape.ranks()):
            runtime.transport.hosting(agents[rank], procs[index * count : (index + 1) * count])
        started = all_answered(host_agents(at).spawn_procs, (mesh_id, count, name, commands, setup))
        # A proc lost while starting is reported by supervision; unread, this is no news.
        runtime.on_loop(no_news_if_unread, started)
        owned = OwnedMesh(
            owner,
            ProcMesh._kind,
            _stop_procs,
            mesh_id=mesh_id,
            name=name,
            procs=procs,
            shape=shape,
            initialized=started,
        )
        return _owned_by(owner, owned, ProcMesh(mesh_id, procs, shape, self, owned))

    def stop(self, timeout: float = STOP_TIMEOUT) -> Future[Stopped]:
        """Stop every proc mesh the caller spawned on these hosts.

        On the host mesh `attach_to_workers` returned (not a slice or a
        reference), the hosts are released as well: what runs there ends, and
        the workers wait for another controller to attach. Hosts and procs lost
        before or during the stop are skipped, and the future's `Stopped`
        names them.
        """
        if self._at.owned is not None:
            return super().stop(timeout)
        owner = _caller()
        return owner.runtime.submit(_stop_hosted(self._at, owner, timeout))

    def shutdown(self, timeout: float = STOP_TIMEOUT) -> Future[Stopped]:
        """Stop every proc mesh the caller spawned on these hosts, and end this host mesh.

        Afterwards `spawn_procs` and `shutdown` on it raise `RuntimeError`
        (``async with`` a host mesh shuts it down on exit). Only the controller's
        own host meshes can be shut down; a slice or a reference raises
        `RuntimeError`. The host mesh `attach_to_workers` returned also ends its
        workers: no controller can attach to them again. The controller's own
        host stays up: `this_host` gives a new, usable host mesh of it. As with
        `stop`, what was lost is skipped and named in the future's `Stopped`.
        """
        owned = self._at.owned
        if owned is not None:
            owner = _caller()
            self._check_not_shut_down()
            self._shut_down = True
            owned.end()
            return owner.runtime.submit(_release(owned, timeout, final=True))
        if not self._own_hosts:
            raise RuntimeError(
                "cannot shut down a HostMesh that is a reference instead of owned (a slice, "
                "one received in a message, or one got inside an actor)"
            )
        self._check_not_shut_down()
        self._shut_down = True
        return self.stop(timeout)

    def _check_not_shut_down(self) -> None:
        if self._shut_down:
            raise RuntimeError("HostMesh has already been shut down")

    async def __aenter__(self) -> HostMesh:
        self._check_not_shut_down()
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._shut_down:
            return
        owns = self._at.owned is not None or self._own_hosts
        await (self.shutdown() if owns else self.stop())

    def __repr__(self) -> str:
        return f"<HostMesh {self.sizes}>"

    def __reduce__(self) -> tuple[Any, ...]:
        return (HostMesh, (self._at.procs, self._at.shape, None, self._python))


class ProcMesh(Mesh):
    """Procs (OS processes, or simulated ones) on which actors are spawned."""

    _kind = "proc mesh"

    def __init__(
        self,
        mesh_id: str,
        procs: Sequence[str],
        shape: Shape,
        host_mesh: HostMesh,
        owned: OwnedMesh | None = None,
    ) -> None:
        name = owned.name if owned is not None else mesh_id
        self._at = Placement(mesh_id, name, procs, shape, owned)
        self._host_mesh = host_mesh

    @classmethod
    def single(cls, proc: str, host_mesh: HostMesh) -> ProcMesh:
        return cls(proc, (proc,), Shape.unity(), host_mesh)

    def _with_shape(self, shape: Shape) -> ProcMesh:
        at = self._at
        return ProcMesh(at.mesh_id, at.procs, shape, self._host_mesh, at.owned)

    @property
    def host_mesh(self) -> HostMesh:
        return self._host_mesh

    @property
    def initialized(self) -> Future[Any]:
        """Settles when every proc has started."""
        owned = self._at.owned
        if owned is not None and owned.initialized is not None:
            return owned.initialized
        return all_answered(proc_agents(self._at).ping)

    def logging_option(
        self,
        stream_to_client: bool = False,
        aggregate_window_sec: float | None = None,
        level: int = logging.INFO,
    ) -> CoroutineFuture[None]:
        """How the output of these procs reaches the controller's terminal, and their log level.

        ``level`` becomes the level of each proc's root Python logger. With
        ``aggregate_window_sec``, identical lines that procs of this mesh print
        within that many seconds are shown once, with how many there were (it
        needs ``stream_to_client=True``). A proc's output always reaches the
        controller's terminal, so ``stream_to_client`` alone changes nothing.
        The future (await it, or ``get()`` it) settles once every proc applies
        the options; it is a coroutine too, as Monarch's ``async def``
        ``logging_option`` returns (``asyncio.run(procs.logging_option(...))``).
        On the simulator, procs share the controller's process and its terminal:
        the options are checked and nothing else changes.
        """
        options = LoggingOptions.checked(stream_to_client, aggregate_window_sec, level)
        owner = _caller()
        procs = [proc for proc, _ in self._at.targets()]

        async def apply() -> None:
            await self.initialized
            await proc_agents(self._at).set_log_level.call(options.level)
            await host_agents(self._host_mesh._at).logging_option.call(procs, options)

        return CoroutineFuture.of(owner.runtime.submit(apply()))

    def host_of(self, base: int) -> HostMesh:
        """The host of the member at position ``base`` of the proc list, as a mesh of one.

        The list holds the procs of each host of ``host_mesh`` in turn, as many on each.
        """
        hosts = self._host_mesh._at
        per_host = len(self._at.procs) // len(hosts.shape)
        return HostMesh.single(hosts.procs[hosts.shape.ranks()[base // per_host]])

    def spawn(
        self,
        name: str,
        cls: type[T],
        *args: Any,
        restart: RestartPolicy | None = None,
        **kwargs: Any,
    ) -> T:
        """Spawn one ``cls(*args, **kwargs)`` actor on every proc of this mesh.

        Returns at once an `ActorMesh` of them; ``__init__`` runs on each proc before
        the actor's first message. Arguments are checked against ``cls.__init__``
        here. With ``restart``, failed members are restarted by the owner (see
        `RestartPolicy`); the keyword is therefore not passed to ``__init__``.

        Type checkers see the mesh as ``cls`` itself (as in Monarch), so that its
        endpoints are typed: ``mesh.train`` is an `Endpoint` of ``train``'s parameters
        and return type, and the mesh's own members (``slice``, ``stop``, ...) are
        there too. Annotate a mesh of ``Trainer`` as ``Trainer``.
        """
        at = self._at
        at.check_usable()
        if not (isinstance(cls, type) and issubclass(cls, Actor)):
            raise TypeError(f"spawn needs a subclass of danaus.Actor, got {cls!r}")
        if restart is not None and not isinstance(restart, RestartPolicy):
            raise TypeError(f"restart must be a danaus.RestartPolicy, not {restart!r}")
        endpoints = endpoints_of(cls)
        clashes = sorted({n for n, spec in endpoints.items() if not spec.plain} & RESERVED)
        if clashes:
            raise ValueError(
                f"{cls.__qualname__} endpoints {clashes} clash with ActorMesh attributes"
            )
        try:
            inspect.signature(cls).bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"{cls.__qualname__}(): {exc}") from None
        owner = _caller()
        runtime = owner.runtime
        built = dumps((cls, args, kwargs), f"an argument of {cls.__qualname__}()")
        runtime.check_size(built, "spawning %s with these arguments", cls.__qualname__)
        mesh_id = runtime.new_id()
        order = SpawnOrder(
            mesh_id, name, built, owner.as_creator(), (runtime.proc_id, owner.key), self
        )
        procs = at.members()
        owned = OwnedMesh(
            owner,
            ActorMesh._kind,
            _stop_actors,
            mesh_id=mesh_id,
            name=name,
            procs=procs,
            shape=at.shape,
            spawn=order,
            policy=restart,
            actor_class=class_path(cls),
            parent=at.owned,
        )
        mesh: ActorMesh[T] = ActorMesh(mesh_id, name, endpoints, procs, at.shape, self, owned)
        _owned_by(owner, owned, mesh)
        runtime.supervisor.adopt(owned)
        proc_agents(at).spawn.broadcast(order)
        return mesh  # type: ignore[return-value]  # the mesh stands for a T: see above

    def activate(self) -> Any:
        """Make torch operations in this code run on every proc of this mesh (or slice).

        From the call until the ``with`` block it opens ends, tensors made here
        are `danaus.Tensor` handles, each proc holding a shard of its own (see the
        documentation's *Distributed tensors*). Needs torch.
        """
        from danaus.tensor.active import Activated

        return Activated(self)

    def rank_tensor(self, dim: str | Sequence[str]) -> Any:
        """A tensor on this mesh whose shard on each proc is its coordinate along ``dim``
        (or, given several dimensions, its rank within them). Needs torch."""
        from danaus.tensor.ranks import rank_tensor

        return rank_tensor(self, dim)

    def rank_tensors(self) -> dict[str, Any]:
        """`rank_tensor` of each dimension."""
        return {dim: self.rank_tensor(dim) for dim in self._at.shape.labels}

    def process_group(self, dims: str | Sequence[str]) -> Any:
        """The torch.distributed process groups of this mesh along ``dims``, for
        `danaus.remote` functions. Needs torch."""
        from danaus.tensor.process_group import RemoteProcessGroup

        return RemoteProcessGroup((dims,) if isinstance(dims, str) else tuple(dims), self)

    def to_table(self) -> str:
        """Where each proc of this mesh lives, as a table: ``host:proc`` per cell."""
        from danaus.core.mesh_table import mesh_table

        hosts = len(self._host_mesh._at.shape)
        per_host = max(1, len(self._at.procs) // max(1, hosts))
        return mesh_table(self._at.shape, lambda at: f"{at // per_host}:{at % per_host}")

    def __repr__(self) -> str:
        return f"<ProcMesh {self._at.mesh_id} {self.sizes}>"

    def __reduce__(self) -> tuple[Any, ...]:
        at = self._at
        return (ProcMesh, (at.mesh_id, at.members(), at.shape, self._host_mesh))


def _owned_by(owner: Instance, owned: OwnedMesh, mesh: M) -> M:
    """``mesh``, the whole mesh ``owned`` describes, on its owner's list."""
    owned.mesh = mesh
    owner.owned.append(owned)
    return mesh


async def _stop_actors(owned: OwnedMesh, timeout: float) -> Stopped:
    """Stop the members of an actor mesh: no new messages; queued ones finish; owned meshes
    stop; then ``__cleanup__``. Members whose proc was lost are skipped (and named)."""
    at = owned.whole
    known = set(owned.owner.runtime.lost_procs)
    found = Outcomes()
    answers = await outcomes(proc_agents(at).stop_actor, (at.mesh_id, timeout), {})
    lost = found.losses(answers)
    members = [LostMember(at.name, at.shape.point(i), lost[i]) for i in sorted(lost)]
    stopped = skipped(owned.kind, at.name, members, known)
    found.raise_first()
    return stopped


async def _stop_procs(owned: OwnedMesh, timeout: float) -> Stopped:
    """Stop every actor on a proc mesh's procs (children first), then end the procs.

    Procs lost before or during the stop, on their own or with their host,
    are skipped (and named in the result); other errors are raised once the
    rest is stopped.
    """
    at = owned.whole
    assert isinstance(owned.mesh, ProcMesh)
    hosts = owned.mesh.host_mesh._at
    for child in owned.children:
        child.end(with_procs=True)
    runtime = owned.owner.runtime
    known = set(runtime.lost_procs)
    found = Outcomes()
    lost = found.losses(await outcomes(proc_agents(at).stop_all, (timeout,), {}))
    stopping = outcomes(host_agents(hosts).stop_procs, (at.mesh_id, timeout), {})
    lost_hosts = found.losses(await stopping)
    procs, losses = at.members(), runtime.lost_procs
    per_host = len(procs) // len(hosts.shape)
    for base, proc in enumerate(procs):
        host_loss = lost_hosts.get(base // per_host)
        if host_loss is not None:  # the proc was lost with its host, if not before
            lost.setdefault(base, losses.get(proc, host_loss))
    members = [LostMember(at.name, at.shape.point(i), lost[i]) for i in sorted(lost)]
    stopped = skipped(owned.kind, at.name, members, known)
    for replacement in owned.replacements:
        stopped += await replacement.stop()
    found.raise_first()
    return stopped


async def _release_hosts(owned: OwnedMesh, timeout: float) -> Stopped:
    """Stop what the owner of attached hosts runs there, and let the workers go."""
    return await _release(owned, timeout, final=False)


async def _release(owned: OwnedMesh, timeout: float, final: bool) -> Stopped:
    """Stop what the owner of attached hosts runs there, then release the workers
    (``final``: they end too)."""
    stopped = await _stop_hosted(owned.whole, owned.owner, timeout)
    await owned.owner.runtime.world.release(owned.whole.procs, final)
    return stopped


async def _stop_hosted(hosts: Placement, owner: Instance, timeout: float) -> Stopped:
    """Stop the proc meshes ``owner`` spawned on the hosts ``hosts`` places, newest first;
    with the hosts found lost, they are what the stop skipped."""
    agents = set(hosts.procs)
    mine = [
        owned
        for owned in owner.owned
        if isinstance(owned.mesh, ProcMesh) and set(owned.mesh.host_mesh._at.procs) & agents
    ]
    known = set(owner.runtime.lost_procs)
    stopped = Stopped()
    for owned in reversed(mine):
        stopped += await owned.stop(timeout)
    lost = owner.runtime.lost_procs
    members = [
        LostMember(hosts.name, hosts.shape.point(index), lost[hosts.procs[rank]])
        for index, rank in enumerate(hosts.shape.ranks())
        if hosts.procs[rank] in lost
    ]
    return stopped + skipped(HostMesh._kind, hosts.name, members, known)


async def replacement_proc(owned: OwnedMesh, base: int) -> str:
    """A new proc on the host of member ``base`` of the actor mesh ``owned``, for a restart;
    it stops with the proc mesh the actor mesh was spawned on, if its owner spawned that."""
    assert isinstance(owned.mesh, ActorMesh) and owned.mesh.proc_mesh is not None
    replacement = owned.mesh.proc_mesh.host_of(base).spawn_procs(name=owned.name)
    view = replacement._at.owned
    assert view is not None
    if owned.parent is not None:
        owned.parent.replacements.append(view)
    await replacement.initialized
    return replacement._at.members()[0]


def this_host() -> HostMesh:
    """The host the calling code runs on, as a host mesh of one."""
    instance = context().actor_instance
    return HostMesh.single(
        instance.runtime.host_agent, own=instance.is_client, python=inherited_python()
    )


def this_proc() -> ProcMesh:
    """The proc the calling code runs on, as a proc mesh of one."""
    return context().actor_instance.proc


def hosts() -> HostMesh:
    """Every host of the world (cluster or simulation), as a host mesh with dimension ``hosts``."""
    agents = current_world().hosts()
    own = context().actor_instance.is_client
    return HostMesh(agents, Shape.from_extent(Extent(["hosts"], [len(agents)])), own=own)
