"""HostMesh, ProcMesh and ActorMesh: named multidimensional groups of hosts, procs and actors.

A mesh object is a reference: it pickles into any message, and code holding it
anywhere can message it. The mesh that `spawn`/`spawn_procs` returned to its
owner also carries the owner's view of it, an `OwnedMesh` (stopped, failed
members, members replaced by restarts), which slices of it share.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from danaus.core.actor import Actor, EndpointSpec, endpoints_of
from danaus.core.blocking import discard_outcome
from danaus.core.bootstrap import CommandChoice, commands_for, inherited_python, with_python
from danaus.core.context import context
from danaus.core.endpoint import Endpoint, NotAnEndpoint
from danaus.core.future import CoroutineFuture, Future
from danaus.core.instance import InstanceKind, SpawnOrder
from danaus.core.logs import LoggingOptions
from danaus.core.names import NumberedNames
from danaus.core.owned import STOP_TIMEOUT, OwnedMesh
from danaus.core.serialize import dumps
from danaus.core.shape import Extent, MeshTrait, Shape
from danaus.core.stopped import LostMember, Outcomes, Stopped, skipped
from danaus.core.suggest import close_names
from danaus.core.supervision import RestartPolicy, class_path

if TYPE_CHECKING:
    from danaus.core.instance import Instance

T = TypeVar("T", bound=Actor)


def _caller() -> Instance:
    return context().actor_instance


class _Mesh(MeshTrait):
    """What host, proc and actor meshes share: members on procs, a shape, an owner's view."""

    _procs: Sequence[str]
    _owned: OwnedMesh | None
    _mesh_id: str
    _kind = "mesh"

    def _members(self) -> Sequence[str]:
        """The procs of the members, by position in the base list (after any restarts)."""
        return self._owned.members(self._procs) if self._owned is not None else self._procs

    def _targets(self) -> list[tuple[str, int]]:
        procs = self._members()
        return [(procs[rank], index) for index, rank in enumerate(self._shape.ranks())]

    def _check_usable(self, endpoint: str | None = None) -> None:
        if self._owned is not None:
            self._owned.check_usable(self._shape, endpoint)

    async def __aenter__(self) -> Any:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def stop(self, timeout: float = STOP_TIMEOUT) -> Future[Stopped]:
        """Stop the whole mesh (all of it, even when called on a slice).

        Members take no new messages, finish the queued ones, stop the meshes
        they own, then run ``__cleanup__``; after ``timeout`` seconds the rest are
        abandoned (and procs killed). Stopping is not a failure: members lost
        before or during the stop are skipped, and the future's `Stopped` names
        them.
        """
        owner = _caller()
        owned = self._owner_view()
        if not owned.end():
            return owner._runtime.done(Stopped())
        return owner._runtime.submit(owned.mesh._stop_members(timeout))

    async def _stop_members(self, timeout: float) -> Stopped:
        raise NotImplementedError

    def _own(self, owned: OwnedMesh) -> Any:
        """Become the whole mesh ``owned`` describes, on its owner's list."""
        owned.mesh = self
        owned.owner.owned.append(owned)
        return self

    def _owner_view(self) -> OwnedMesh:
        """The owner's view of this mesh; only the owner's mesh and its slices have one."""
        if self._owned is None:
            raise NotImplementedError(
                f"only the owner of this {self._kind} can stop it; this is a reference to it"
            )
        return self._owned


class HostMesh(_Mesh):
    """Hosts, each with an agent that starts procs on it.

    The host meshes that `this_host` and `hosts` give the controller's code are
    its own: it can `shutdown` them. Slices of them, and host meshes received in
    messages or got inside actors, are references.
    """

    _kind = "host mesh"
    _mesh_id = "hosts"

    def __init__(
        self,
        agents: Sequence[str],
        shape: Shape,
        owned: OwnedMesh | None = None,
        python: str | None = None,
        *,
        own: bool = False,
    ) -> None:
        self._procs = agents
        self._shape = shape
        self._owned = owned
        self._python = python
        self._own_hosts = own
        self._shut_down = False

    @classmethod
    def single(cls, agent: str, *, own: bool = False, python: str | None = None) -> HostMesh:
        return cls((agent,), Shape.unity(), python=python, own=own)

    def _with_shape(self, shape: Shape) -> HostMesh:
        return HostMesh(self._procs, shape, python=self._python)

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
        return HostMesh(self._procs, self._shape, python=python_executable)

    @property
    def is_fake_in_process(self) -> bool:
        """Whether procs spawned here share the caller's OS process (the simulator's do)."""
        return _caller()._runtime.world.procs_in_process

    def _agents(self) -> ActorMesh[Any]:
        from danaus.core.agents import HOST_AGENT, HostAgent

        return ActorMesh(HOST_AGENT, "hosts", endpoints_of(HostAgent), self._procs, self._shape)

    @property
    def initialized(self) -> Future[Any]:
        """Settles when every host's agent answers (for attached hosts: once attached)."""
        if self._owned is not None and self._owned.initialized is not None:
            return self._owned.initialized
        return _proc_agents(self).ping._fold((), {}, None, _ignore)

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
        self._check_usable()
        self._check_not_shut_down()
        extent = Extent.from_dict({} if per_host is None else per_host)
        overlap = set(extent.labels) & set(self._shape.labels)
        if overlap:
            raise ValueError(f"per_host dimensions {sorted(overlap)} are already host dimensions")
        owner = _caller()
        runtime = owner._runtime
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
            Extent(self._shape.labels + extent.labels, self._shape.ndslice.sizes + extent.sizes)
        )
        if bootstrap_command is None and self._python is not None:
            bootstrap_command = with_python(runtime.world.default_command(), self._python)
        commands = commands_for(bootstrap_command, shape)
        mesh_id = runtime.new_id()
        name = name or "procs"
        procs = NumberedNames(f"{mesh_id}.", len(self) * count)
        agents = self._members()
        for index, rank in enumerate(self._shape.ranks()):
            runtime.transport.hosting(agents[rank], procs[index * count : (index + 1) * count])
        started = self._agents().spawn_procs._fold(
            (mesh_id, count, name, commands, setup), {}, None, _ignore
        )
        # A proc lost while starting is reported by supervision; unread, this is no news.
        owner._runtime.on_loop(started._afut.add_done_callback, discard_outcome)
        owned = OwnedMesh(name, ProcMesh._kind, owner, initialized=started)
        return ProcMesh(mesh_id, procs, shape, self, owned)._own(owned)

    def stop(self, timeout: float = STOP_TIMEOUT) -> Future[Stopped]:
        """Stop every proc mesh the caller spawned on these hosts.

        On the host mesh `attach_to_workers` returned (not a slice or a
        reference), the hosts are released as well: what runs there ends, and
        the workers wait for another controller to attach. Hosts and procs lost
        before or during the stop are skipped, and the future's `Stopped`
        names them.
        """
        if self._owned is not None:
            return super().stop(timeout)
        owner = _caller()
        return owner._runtime.submit(self._stop_hosted(owner, timeout))

    async def _stop_members(self, timeout: float) -> Stopped:
        return await self._release(timeout, final=False)

    async def _release(self, timeout: float, final: bool) -> Stopped:
        owned = self._owner_view()
        stopped = await self._stop_hosted(owned.owner, timeout)
        await owned.owner._runtime.world.release(self._procs, final)
        return stopped

    async def _stop_hosted(self, owner: Instance, timeout: float) -> Stopped:
        """Stop the proc meshes ``owner`` spawned on these hosts, newest first; with the
        hosts found lost, they are what the stop skipped."""
        hosts = set(self._procs)
        mine = [
            owned
            for owned in owner.owned
            if isinstance(owned.mesh, ProcMesh) and set(owned.mesh._host_mesh._procs) & hosts
        ]
        known = set(owner._runtime.lost_procs)
        stopped = Stopped()
        for owned in reversed(mine):
            stopped += await owned.stop(timeout)
        name = self._owned.name if self._owned is not None else self._mesh_id
        lost = owner._runtime.lost_procs
        members = [
            LostMember(name, self._shape.point(index), lost[self._procs[rank]])
            for index, rank in enumerate(self._shape.ranks())
            if self._procs[rank] in lost
        ]
        return stopped + skipped(self._kind, name, members, known)

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
        if self._owned is not None:
            owned = self._owner_view()
            owner = _caller()
            self._check_not_shut_down()
            self._shut_down = True
            owned.end()
            return owner._runtime.submit(self._release(timeout, final=True))
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
        owns = self._owned is not None or self._own_hosts
        await (self.shutdown() if owns else self.stop())

    def __repr__(self) -> str:
        return f"<HostMesh {self.sizes}>"

    def __reduce__(self) -> tuple[Any, ...]:
        return (HostMesh, (self._procs, self._shape, None, self._python))


class ProcMesh(_Mesh):
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
        self._mesh_id = mesh_id
        self._procs = procs
        self._shape = shape
        self._host_mesh = host_mesh
        self._owned = owned

    @classmethod
    def single(cls, proc: str, host_mesh: HostMesh) -> ProcMesh:
        return cls(proc, (proc,), Shape.unity(), host_mesh)

    def _with_shape(self, shape: Shape) -> ProcMesh:
        return ProcMesh(self._mesh_id, self._procs, shape, self._host_mesh, self._owned)

    @property
    def host_mesh(self) -> HostMesh:
        return self._host_mesh

    @property
    def initialized(self) -> Future[Any]:
        """Settles when every proc has started."""
        if self._owned is not None and self._owned.initialized is not None:
            return self._owned.initialized
        return _proc_agents(self).ping._fold((), {}, None, _ignore)

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
        members = self._members()
        procs = [members[rank] for rank in self._shape.ranks()]

        async def apply() -> None:
            await self.initialized
            await _proc_agents(self).set_log_level.call(options.level)
            await self._host_mesh._agents().logging_option.call(procs, options)

        return CoroutineFuture.of(owner._runtime.submit(apply()))

    def host_of(self, base: int) -> HostMesh:
        """The host of the member at position ``base`` of the proc list, as a mesh of one.

        The list holds the procs of each host of ``host_mesh`` in turn, as many on each.
        """
        hosts = self._host_mesh
        per_host = len(self._procs) // len(hosts)
        return HostMesh.single(hosts._procs[hosts._shape.ranks()[base // per_host]])

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
        self._check_usable()
        if not (isinstance(cls, type) and issubclass(cls, Actor)):
            raise TypeError(f"spawn needs a subclass of danaus.Actor, got {cls!r}")
        if restart is not None and not isinstance(restart, RestartPolicy):
            raise TypeError(f"restart must be a danaus.RestartPolicy, not {restart!r}")
        endpoints = endpoints_of(cls)
        clashes = sorted({n for n, spec in endpoints.items() if not spec.plain} & _RESERVED)
        if clashes:
            raise ValueError(
                f"{cls.__qualname__} endpoints {clashes} clash with ActorMesh attributes"
            )
        try:
            inspect.signature(cls).bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"{cls.__qualname__}(): {exc}") from None
        owner = _caller()
        runtime = owner._runtime
        built = dumps((cls, args, kwargs), f"an argument of {cls.__qualname__}()")
        runtime.check_size(built, "spawning %s with these arguments", cls.__qualname__)
        mesh_id = runtime.new_id()
        order = SpawnOrder(
            mesh_id,
            name,
            built,
            owner.as_creator(),
            (runtime.proc_id, owner.key),
            self,
        )
        owned = OwnedMesh(
            name, ActorMesh._kind, owner, spawn=order, policy=restart, actor_class=class_path(cls)
        )
        mesh: ActorMesh[T] = ActorMesh(
            mesh_id, name, endpoints, self._members(), self._shape, self, owned
        )
        if self._owned is not None:
            self._owned.children.append(owned)
        mesh._own(owned)
        runtime.supervisor.adopt(owned)
        _proc_agents(self).spawn.broadcast(order)
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
        return {dim: self.rank_tensor(dim) for dim in self._shape.labels}

    def process_group(self, dims: str | Sequence[str]) -> Any:
        """The torch.distributed process groups of this mesh along ``dims``, for
        `danaus.remote` functions. Needs torch."""
        from danaus.tensor.process_group import RemoteProcessGroup

        return RemoteProcessGroup((dims,) if isinstance(dims, str) else tuple(dims), self)

    def to_table(self) -> str:
        """Where each proc of this mesh lives, as a table: ``host:proc`` per cell."""
        from danaus.core.mesh_table import mesh_table

        per_host = max(1, len(self._procs) // max(1, len(self._host_mesh)))
        return mesh_table(self._shape, lambda at: f"{at // per_host}:{at % per_host}")

    async def _stop_members(self, timeout: float) -> Stopped:
        """Stop every actor on these procs (children first), then end the procs.

        Procs lost before or during the stop, on their own or with their host,
        are skipped (and named in the result); other errors are raised once the
        rest is stopped.
        """
        owned = self._owner_view()
        for child in owned.children:
            child.end(with_procs=True)
        known = set(owned.owner._runtime.lost_procs)
        outcomes = Outcomes()
        lost = outcomes.losses(await _proc_agents(self).stop_all._outcomes((timeout,), {}))
        hosts = self._host_mesh
        stopping = hosts._agents().stop_procs._outcomes((self._mesh_id, timeout), {})
        lost_hosts = outcomes.losses(await stopping)
        procs, losses = self._members(), owned.owner._runtime.lost_procs
        per_host = len(procs) // len(hosts)
        for base, proc in enumerate(procs):
            host_loss = lost_hosts.get(base // per_host)
            if host_loss is not None:  # the proc was lost with its host, if not before
                lost.setdefault(base, losses.get(proc, host_loss))
        members = [LostMember(owned.name, self._shape.point(i), lost[i]) for i in sorted(lost)]
        stopped = skipped(self._kind, owned.name, members, known)
        for replacement in owned.replacements:
            stopped += await replacement._owner_view().stop()
        outcomes.raise_first()
        return stopped

    def __repr__(self) -> str:
        return f"<ProcMesh {self._mesh_id} {self.sizes}>"

    def __reduce__(self) -> tuple[Any, ...]:
        return (ProcMesh, (self._mesh_id, self._members(), self._shape, self._host_mesh))


class ActorMesh(_Mesh, Generic[T]):
    """Actors, one per proc of the proc mesh they were spawned on. Endpoints are attributes."""

    _kind = "actor mesh"

    def __init__(
        self,
        mesh_id: str,
        name: str,
        endpoints: dict[str, EndpointSpec],
        procs: Sequence[str],
        shape: Shape,
        proc_mesh: ProcMesh | None = None,
        owned: OwnedMesh | None = None,
    ) -> None:
        self._mesh_id = mesh_id
        self._name = name
        self._endpoints = endpoints
        self._procs = procs
        self._shape = shape
        self._proc_mesh = proc_mesh
        self._owned = owned

    def _with_shape(self, shape: Shape) -> ActorMesh[T]:
        return ActorMesh(
            self._mesh_id,
            self._name,
            self._endpoints,
            self._procs,
            shape,
            self._proc_mesh,
            self._owned,
        )

    def __getattr__(self, name: str) -> Any:
        """The endpoint ``name`` (an `Endpoint`; a `NotAnEndpoint` for a plain method)."""
        if name.startswith("_"):
            raise AttributeError(name)
        spec = self._endpoints.get(name)
        if spec is None:
            public = [n for n in self._endpoints if not n.startswith("_")]
            marked = [n for n in public if not self._endpoints[n].plain]
            hint = close_names(name, public) or f"; its endpoints: {', '.join(marked) or 'none'}"
            raise AttributeError(f"actor mesh {self._name!r} has no endpoint {name!r}{hint}")
        return NotAnEndpoint(self, spec) if spec.plain else Endpoint(self, spec)

    @property
    def name(self) -> str:
        return self._name

    @property
    def proc_mesh(self) -> ProcMesh | None:
        return self._proc_mesh

    @property
    def initialized(self) -> Future[None]:
        """Settles when every actor has run ``__init__`` (raises if one failed)."""
        return Endpoint(self, self._endpoints["__initialized__"])._fold((), {}, None, _ignore)

    async def _stop_members(self, timeout: float) -> Stopped:
        """No new messages; queued ones finish; owned meshes stop; then ``__cleanup__``.

        Members whose proc was lost are skipped (and named in the result).
        """
        known = set(self._owner_view().owner._runtime.lost_procs)
        outcomes = Outcomes()
        answers = await _proc_agents(self).stop_actor._outcomes((self._mesh_id, timeout), {})
        lost = outcomes.losses(answers)
        members = [LostMember(self._name, self._shape.point(i), lost[i]) for i in sorted(lost)]
        stopped = skipped(self._kind, self._name, members, known)
        outcomes.raise_first()
        return stopped

    def __repr__(self) -> str:
        return f"<ActorMesh {self._name} {self.sizes}>"

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            ActorMesh,
            (
                self._mesh_id,
                self._name,
                self._endpoints,
                self._members(),
                self._shape,
                self._proc_mesh,
            ),
        )


def _ignore(acc: None, value: Any) -> None:
    return None


def _proc_agents(mesh: _Mesh) -> ActorMesh[Any]:
    """The proc agents of the procs under ``mesh``, shaped like it."""
    from danaus.core.agents import PROC_AGENT, ProcAgent

    return ActorMesh(PROC_AGENT, "agents", endpoints_of(ProcAgent), mesh._members(), mesh._shape)


def agent_of(proc: str) -> ActorMesh[Any]:
    """The agent of one proc."""
    from danaus.core.agents import PROC_AGENT, ProcAgent

    return ActorMesh(PROC_AGENT, "agents", endpoints_of(ProcAgent), (proc,), Shape.unity())


_RESERVED = frozenset(name for name in dir(ActorMesh) if not name.startswith("_"))


def this_host() -> HostMesh:
    """The host the calling code runs on, as a host mesh of one."""
    instance = context().actor_instance
    return HostMesh.single(
        instance._runtime.host_agent,
        own=instance.kind is InstanceKind.CLIENT,
        python=inherited_python(),
    )


def this_proc() -> ProcMesh:
    """The proc the calling code runs on, as a proc mesh of one."""
    return context().actor_instance.proc


def hosts() -> HostMesh:
    """Every host of the world (cluster or simulation), as a host mesh with dimension ``hosts``."""
    from danaus.core.config import current_world

    agents = current_world().hosts()
    own = context().actor_instance.kind is InstanceKind.CLIENT
    return HostMesh(agents, Shape.from_extent(Extent(["hosts"], [len(agents)])), own=own)
