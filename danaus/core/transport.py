"""The contract between Danaus's core and a transport: all that core needs of one, and no more.

A transport brings three things:

* a `World`: everything about one run in one OS process: the event loop the
  runtime runs on (real asyncio, or a virtual-time loop), how sync endpoints
  run, the hosts it knows, its launcher, its trace, its random source, and the
  hooks a run may set (the unhandled-fault hook, fault sites, fault injection);
* one `Transport` per proc: ordered, thread-safe ``send`` of frames to another
  proc by id (and ``send_message`` of an envelope and its payload, which it
  encodes into frames unless its procs share one OS process), a receive
  callback, a notice when a peer is lost, and memory registration for
  one-sided reads and writes;
* a `Launcher` that starts procs on a host and reports when they end.

A transport package ``danaus.transports.<name>`` exposes ``OPTIONS``, the
fields of `danaus.core.settings.Settings` it takes beyond those every transport
takes; ``configured(settings)``, which checks them (called by ``configure()``
and again just before the world is made); ``create_world(settings) -> World``;
and its ``World`` class. It may expose ``prepare(settings)``, called after each
``configured`` succeeds: it starts or imports what a world made from those
settings will need (tcp starts its fork server there, before it imports its
world's code), so that their cost overlaps the program's own instead of
following it. A world holds its job's `JobOptions` from the start
(`World.options`), and hands them to the worlds of the procs it starts.
"""

from __future__ import annotations

import asyncio
import random
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from danaus.core.errors import SupervisionError
from danaus.core.serialize import Buffer
from danaus.core.settings import JobOptions
from danaus.core.wire import Envelope, encode

if TYPE_CHECKING:
    from danaus.core.bootstrap import BootstrapCommand
    from danaus.core.faults import Faults
    from danaus.core.logs import LoggingOptions
    from danaus.core.runtime import Runtime
    from danaus.core.sites import Sites
    from danaus.core.supervision import MeshFailure
    from danaus.core.trace import Trace

T = TypeVar("T")

ROOT = "root"
"""The proc id of the controller's own proc, in every world."""

FrameHandler = Callable[[str, list[Buffer]], None]
"""Receives ``(sender proc, frames)`` on the world's loop thread."""
MessageHandler = Callable[[str, Envelope, list[Buffer]], None]
"""Receives ``(sender proc, envelope, payload frames)`` on the world's loop thread: a message
whose envelope its transport handed over as an object (see `Transport.send_message`)."""
RefusalHandler = Callable[[str, list[Buffer], BaseException], None]
"""Told, on the world's loop thread, of a message from ``sender proc`` that its transport
refused before delivery: its leading frames that were read (its envelope first, unless even
that was too large to read), and the error its sender is to get (`MessageTooLargeError`)."""


@dataclass(frozen=True)
class ProcLoss:
    """Why a proc is gone: what the launcher or the network saw."""

    proc: str
    reason: str
    host: str | None = None
    pid: int | None = None
    exit_code: int | None = None
    signal: int | None = None
    stopped: bool = False
    """The proc was stopped on purpose, by a stop of its mesh: its actors stopped, none failed."""

    def actor_cause(self) -> str:
        """Why an actor of this proc failed, worded as Monarch's reports."""
        if self.signal is not None:
            return f"the process this actor was running on failed: Killed(sig={self.signal})"
        if self.exit_code is not None:
            return f"the process this actor was running on failed: Exited(code={self.exit_code})"
        return f"its process {self.reason}"

    def where(self) -> str:
        """Which proc: ``proc P on host H (pid N)``, as much as is known."""
        parts = [f"proc {self.proc}"]
        if self.host is not None:
            parts.append(f"on host {self.host}")
        if self.pid is not None:
            parts.append(f"(pid {self.pid})")
        return " ".join(parts)

    def describe(self) -> str:
        parts = [self.where(), self.reason]
        if self.exit_code is not None:
            parts.append(f"exit code {self.exit_code}")
        if self.signal is not None:
            parts.append(f"signal {self.signal}")
        return " ".join(parts)


LossHandler = Callable[[ProcLoss], None]


def memory_owner_lost(loss: ProcLoss) -> SupervisionError:
    """What a read or write of memory registered by a lost proc fails with."""
    return SupervisionError(f"the owner of the memory is gone: {loss.describe()}", loss)


@dataclass(frozen=True)
class MemoryHandle:
    """A picklable reference to memory registered with a transport."""

    owner: str
    key: int
    size: int
    backend: str


@dataclass(frozen=True)
class DeviceMemory:
    """Memory on an accelerator (a CUDA tensor's), which no memoryview can show: where, how long.

    It stands for a memoryview in `Transport.register`, `read` and `write` when
    ``device`` is in the transport's `Transport.memory_devices`. ``keep`` is the
    object that owns the memory, held so that it outlives this reference.
    """

    address: int
    nbytes: int
    device: str
    keep: Any = field(default=None, repr=False, compare=False)

    def __getitem__(self, part: slice) -> DeviceMemory:
        """A contiguous range (``memory[a:b]``), as a memoryview's slice would be."""
        start, stop, step = part.indices(self.nbytes)
        if step != 1:
            raise ValueError("device memory is sliced in contiguous ranges only")
        return replace(self, address=self.address + start, nbytes=max(0, stop - start))


Memory = memoryview | DeviceMemory
"""What `Transport.register`, `read` and `write` take: a memoryview, or device memory."""


class Transport(ABC):
    """One proc's endpoint: it sends frames to other procs by proc id.

    It has no fields of its own, so that a transport may keep its own in slots.
    """

    __slots__ = ()

    proc_id: str
    memory_backend: str = "none"
    """What serves `read` and `write`, as `danaus.rdma.backend()` reports it."""
    memory_one_sided: bool = False
    """True when the remote side's CPU takes no part (real RDMA, or its simulation)."""
    memory_devices: frozenset[str] = frozenset({"cpu"})
    """The kinds of memory `register` accepts (``cpu``, ``cuda``)."""
    memory_fallback_reason: str = ""
    """Why transfers are not one-sided on a transport that can make them so (for the warning)."""
    host_address: str = "127.0.0.1"
    """The address of this proc's host on the job's network: where it may listen for peers of
    the job outside Danaus's own connections (torch.distributed's, for the tensor engine)."""

    @abstractmethod
    def start(
        self,
        on_frames: FrameHandler,
        on_loss: LossHandler,
        on_refused: RefusalHandler,
        on_message: MessageHandler,
    ) -> None:
        """Begin delivering. The callbacks are called on the world's loop thread.

        A message the transport refuses (larger than the world's
        ``max_message_bytes``) goes to ``on_refused``, in its place in the order
        of its sender's messages; the connection goes on with the next one.
        A message whose envelope the transport hands over as an object (see
        `send_message`) goes to ``on_message``, every other to ``on_frames``.
        """

    @abstractmethod
    def send(self, dest: str, frames: Sequence[Buffer]) -> None:
        """Queue ``frames`` for ``dest``. Thread-safe, never blocks.

        Messages from this proc to one destination arrive in the order sent,
        each once, while both procs live. Sending to a proc that is gone drops
        the message; the loss is reported through ``on_loss`` to watchers. A
        link that breaks while both procs live is never left half-open: one of
        the two is declared lost.
        The frames may be read after ``send`` returns; callers do not mutate them.
        """

    def send_message(self, dest: str, envelope: Envelope, payload: Sequence[Buffer]) -> None:
        """Send ``envelope`` and its ``payload`` frames to ``dest``, as `send` sends frames.

        They are encoded into frames (`danaus.core.wire.encode`), which the
        receiver decodes and validates. A transport whose procs share one OS
        process may hand the envelope object itself to the receiver's
        ``on_message`` instead, which validates it without decoding: an
        envelope is immutable, so the two procs share no state through it,
        and the payload frames are copied as `send` copies them, so no value
        in them is shared either.
        """
        self.send(dest, encode(envelope, payload))

    @abstractmethod
    def watch(self, proc: str) -> None:
        """Report through ``on_loss`` when ``proc`` is lost (once; idempotent)."""

    def hosting(self, agent: str, procs: Sequence[str]) -> None:  # noqa: B027 - optional
        """``procs`` are being started by host agent ``agent``: if it is lost, so are they.

        Called before the agent is asked to start them, so that a host lost
        before or while it starts them still accounts for every one.
        """

    def register(self, buffer: Memory) -> MemoryHandle:
        """Register ``buffer`` for one-sided reads and writes by other procs."""
        raise NotImplementedError(f"{type(self).__name__} has no memory interface")

    def unregister(self, handle: MemoryHandle) -> None:
        raise NotImplementedError(f"{type(self).__name__} has no memory interface")

    async def read(self, handle: MemoryHandle, offset: int, dst: Memory) -> None:
        """Copy ``len(dst)`` bytes at ``offset`` of the remote memory into ``dst``."""
        raise NotImplementedError(f"{type(self).__name__} has no memory interface")

    async def write(self, handle: MemoryHandle, offset: int, src: Memory) -> None:
        """Copy ``src`` into the remote memory at ``offset``."""
        raise NotImplementedError(f"{type(self).__name__} has no memory interface")

    @abstractmethod
    def close(self) -> None:
        """Stop sending and receiving."""


@dataclass(frozen=True)
class ProcSpec:
    """What a launcher needs to start one proc."""

    proc_id: str
    host: str
    name: str
    command: BootstrapCommand | None = None
    """How to start the proc's process; None: the transport's own way."""
    setup: Sequence[Buffer] | None = None
    """A pickled callable (frames of `danaus.core.serialize.dumps`) the proc runs first."""


class Launcher(ABC):
    """Starts procs on a host and reports their ends."""

    @abstractmethod
    async def launch(self, specs: Sequence[ProcSpec]) -> None:
        """Start the procs; return once each can receive messages."""

    @abstractmethod
    async def stop(self, procs: Sequence[str], timeout: float) -> None:
        """End the procs: politely, then by force after ``timeout`` seconds."""

    def set_output(self, procs: Sequence[str], options: LoggingOptions) -> None:  # noqa: B027
        """How the output of these procs (those this launcher started) reaches the
        controller's terminal. Where procs write to the terminal directly, nothing."""


class ActorRunner(ABC):
    """Where one actor's code runs: the loop its messages are handled on, and its sync code.

    All of an actor's code runs on one thread: ``__init__``, sync and async
    endpoints, ``__supervise__`` and ``__cleanup__``.
    """

    loop: asyncio.AbstractEventLoop
    """The loop the actor's message loop and async code run on."""

    @abstractmethod
    def call_sync(self, fn: Callable[[], Any]) -> Awaitable[Any]:
        """Run sync user code ``fn`` for a task of `loop`: an awaitable of its result."""

    def close(self) -> None:  # noqa: B027 - a shared runner holds nothing per actor
        """Release what the runner holds once its actor is gone (from any thread)."""


FaultHook = Callable[["MeshFailure"], None]
"""What runs when a failure reaches the root unhandled (see `danaus.unhandled_fault_hook`)."""


class World(ABC):
    """Everything one OS process needs to run procs on a transport, and the run's own state.

    Nothing about a run lives in module globals: two worlds made one after the
    other in one process share no hook, no fault site and no random state.
    """

    name: str
    loop: asyncio.AbstractEventLoop
    trace: Trace
    launcher: Launcher
    random: random.Random
    """Randomness for the runtime (restart jitter): seeded where runs must replay."""
    faults: Faults
    """What a chaos run can do to this world (crash, pause, network faults)."""
    deterministic: bool = False
    procs_in_process: bool = False
    """Whether the procs this world starts live in this OS process (the simulator's do)."""
    seed: int = 0
    """The run's seed: the simulator's; 0 on real transports (randomness derived from it, such
    as each proc's torch generator in the tensor engine, replays run after run)."""
    options: JobOptions = JobOptions()
    """The job's options, the same in every proc of the job. Core applies three: the runtime
    refuses to send a message over ``max_message_bytes`` (None: no limit), casts travel along
    trees of ``cast_fanout`` (`danaus.core.casting`), and a ``spawn_procs`` asking more of each
    host than ``max_procs_per_host`` is refused before anything starts."""
    sites: Sites | None = None
    """The live fault sites of a chaos run on this world, if any."""
    fault_hook: FaultHook | None = None
    """This run's unhandled-fault hook; None: the process's ``danaus.unhandled_fault_hook``."""

    @property
    @abstractmethod
    def root(self) -> Runtime:
        """The runtime of the proc this OS process's main code belongs to."""

    def decode_shared(
        self, frames: Sequence[Buffer], decode: Callable[[Sequence[Buffer]], tuple[T, bool]]
    ) -> T:
        """The value that ``decode(frames)`` gives, with whether every proc of this OS process
        may share it as it is (nothing in it can change).

        Here every call decodes its own frames: a proc of a real transport decodes
        the bytes it received itself. A world whose procs share one OS process (the
        simulator's) may give back a value that may be shared, decoded from equal
        frames before, so that an order sent to every member of a mesh is not
        decoded once per member.
        """
        return decode(frames)[0]

    def live_workers(self) -> list[str]:
        """The live worker procs of every host (as ``faults.workers`` reports them)."""
        return [p for host in self.hosts() for p in self.faults.workers(host)]

    def live_hosts(self) -> list[str]:
        """The hosts whose agents are up (every host, in a world that loses none)."""
        return list(self.hosts())

    def local_runtimes(self) -> list[Runtime]:
        """The runtimes of the procs living in this OS process (they record into `trace`)."""
        return [self.root]

    def is_local(self, proc: str) -> bool:
        """Whether ``proc`` lives in this OS process (one of `local_runtimes`)."""
        return any(runtime.proc_id == proc for runtime in self.local_runtimes())

    @abstractmethod
    def hosts(self) -> Sequence[str]:
        """Proc ids of the host agents of every host in the world, in order."""

    def default_command(self) -> BootstrapCommand | None:
        """How a proc's process starts unless ``spawn_procs`` says otherwise (None: procs
        are not processes started by a command, as on the simulator)."""
        return None

    def attach(self, workers: Sequence[str], key: object, timeout: float) -> list[str]:
        """Begin attaching this controller to the host agents (workers) at ``workers``.

        Returns their proc ids at once, in order; messages to them wait until
        they are attached. ``key`` proves this controller belongs to the job
        the workers serve (None: the transport's default source). A worker not
        attached within ``timeout`` seconds is reported lost, with the reason.
        """
        raise NotImplementedError(f"the {self.name} transport cannot attach to workers")

    async def release(self, agents: Sequence[str], final: bool) -> None:
        """End this controller's use of attached host agents: whatever they run ends.

        The workers wait for another controller, or exit if ``final``.
        """
        raise NotImplementedError(f"the {self.name} transport has no attached workers")

    @abstractmethod
    def actor_runner(self, name: str) -> ActorRunner:
        """Where a new user actor called ``name`` runs."""

    @abstractmethod
    def shutdown(self) -> None:
        """Stop every mesh and proc this process started, then close."""

    @abstractmethod
    def exit_proc(self, runtime: Runtime, code: int) -> None:
        """User code in ``runtime``'s proc called ``sys.exit(code)``: end that proc."""

    @abstractmethod
    def abort(self, status: int) -> NoReturn:
        """End the controller now with ``status``, taking down every proc it started."""
