"""The simulated network: latency, bandwidth and per-message cost, on the simulation's clock.

Each host has a NIC with a send and a receive queue; procs of one host talk
over a shared-memory bus instead. A message occupies the sender's queue for
``per_message + size / bandwidth`` seconds, crosses the link after
``latency`` plus exponential jitter, then occupies the receiver's queue for
``size / bandwidth``. Each queue is a FIFO single server, which needs only
the time it next falls idle: the same answer a resource of capacity one in a
discrete-event simulator gives, without a process per message.

Messages from one proc to another never overtake each other (every real
transport here keeps per-pair order), and every message is copied at send
time, as a real network would, so the receiver never shares the sender's
memory. A message sent with its envelope as an object (`send_message`) keeps
it so: the receiver gets the immutable envelope itself, not frames to decode,
and the network counts the bytes its header frame would take.

A message in flight is an event of the `Timeline`: its arrival, through the
`Lane` of the queue that served it last (the messages a queue passes on
mostly arrive in the order it served them).

Faults change the model while they last: extra latency and jitter on a link,
a link that holds its traffic (a clog, or one direction of a partition: TCP
keeps retrying, so what was sent arrives once the link heals), a slower NIC,
a slow proc, a slow CPU. A proc cut off from the controller's host for longer
than the heartbeat timeout is declared lost, as the controller's failure
detector would declare it; so is a paused proc.

Handling a message costs a proc no time in the model (what it costs is part
of ``per_message``), except on a proc whose CPU a fault slowed by a factor:
there each message waits for the proc's CPU, another FIFO single server, and
occupies it for ``(factor - 1) * handling`` seconds, so that a burst queues
up as it would behind a slow CPU.
"""

from __future__ import annotations

import asyncio
import enum
import itertools
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from math import log
from typing import TYPE_CHECKING, Any

import msgspec

from danaus.core import trace as ev
from danaus.core.faults import Heal
from danaus.core.serialize import Buffer
from danaus.core.transport import (
    FrameHandler,
    LossHandler,
    MemoryHandle,
    MessageHandler,
    ProcLoss,
    RefusalHandler,
    Transport,
    memory_owner_lost,
)
from danaus.core.wire import Envelope, header_bytes
from danaus.transports.frames import copy_frames
from danaus.transports.sim.timeline import Lane, Timeline

if TYPE_CHECKING:
    from danaus.core.trace import Trace


@dataclass(frozen=True)
class NetworkModel:
    """Timing of the simulated cluster. Times in seconds, bandwidths in bytes per second."""

    latency: float = 25e-6
    jitter: float = 5e-6
    bandwidth: float = 12.5e9
    local_latency: float = 2e-6
    local_bandwidth: float = 25e9
    per_message: float = 1e-6
    spawn_time: float = 0.05
    detect_crash: float = 1e-3
    heartbeat_timeout: float = 3.0
    handling: float = 50e-6
    """Seconds of a proc's CPU that handling one message takes, as a slowed CPU counts them."""


REQUEST_BYTES = 64
"""The size of a memory request or acknowledgment on the wire."""


class _Queue:
    """A FIFO single server: a NIC direction or a host's memory bus.

    A message that reaches it at time ``t`` and takes ``d`` seconds leaves it at
    ``max(t, free_at) + d``, which becomes ``free_at`` (computed where messages
    are scheduled, without a call per queue). ``lane`` holds the arrivals of
    the messages it served last on their way.
    """

    __slots__ = ("free_at", "lane")

    def __init__(self) -> None:
        self.free_at = 0.0
        self.lane = Lane()


class _Cpu:
    """A proc's CPU while a fault slows it: a FIFO single server of the messages it handles."""

    __slots__ = ("cost", "factor", "free_at")

    def __init__(self) -> None:
        self.factor = 1.0
        self.cost = 0.0
        """Seconds each message occupies it: ``(factor - 1) * handling``."""
        self.free_at = 0.0


class _Host:
    __slots__ = ("bandwidth_factor", "bus", "endpoints", "links", "name", "rx", "tx")

    def __init__(self, name: str) -> None:
        self.name = name
        self.tx = _Queue()
        self.rx = _Queue()
        self.bus = _Queue()
        self.bandwidth_factor = 1.0
        self.endpoints: dict[str, SimTransport] = {}
        """The procs of this host (as in `SimNetwork.endpoints`, in the order they came)."""
        self.links: dict[str, _Link] = {}
        """The links from this host that a fault changed, by destination host."""


class _Message(msgspec.Struct, eq=False):
    """Something crossing the network: frames for the runtime, or a transfer the network serves.

    A struct, not a class of slots: one is made for every message, and a
    struct is built in C without running an ``__init__``. Compared by
    identity.
    """

    src: str
    dst: str
    frames: list[Buffer] | None
    """The frames for the runtime: the payload alone when ``envelope`` is set."""
    size: int
    deliver: Callable[[], None] | None = None
    receiver: SimTransport | None = None
    """The endpoint of ``dst`` when it was sent on its way (see `SimTransport.replaced`)."""
    envelope: Envelope | None = None
    """The message's envelope, handed over as it was sent (None: it is in ``frames``)."""


class _MemoryOp:
    """A read or write of registered memory, waiting for its answer."""

    __slots__ = ("future", "handle", "offset", "view", "write")

    def __init__(
        self,
        future: asyncio.Future[None],
        handle: MemoryHandle,
        offset: int,
        view: memoryview,
        write: bool,
    ) -> None:
        self.future = future
        self.handle = handle
        self.offset = offset
        self.view = view
        self.write = write


class ProcState(enum.Enum):
    """A simulated proc as the network sees it."""

    BOOTING = "booting"
    """Launched; messages to it wait until it is up."""
    UP = "up"
    PAUSED = "paused"
    """Frozen: nothing in or out until resumed (or declared lost)."""
    DOWN = "down"


LIVE = (ProcState.UP, ProcState.PAUSED)
"""The states of a proc that has not been lost."""

_BOOTING, _UP, _PAUSED, _DOWN = ProcState.BOOTING, ProcState.UP, ProcState.PAUSED, ProcState.DOWN
"""The states for the message path, where each is read per message: reading a member
off an Enum class costs a few times what reading a global does."""


class _Route:
    """What one proc's messages to one destination need on their way, in one object.

    Looking up the destination's endpoint and the last arrival by proc id for
    every message took two dictionaries; at thousands of procs each lookup
    mostly missed the CPU's caches.
    """

    __slots__ = ("last", "receiver")

    def __init__(self) -> None:
        self.receiver: SimTransport | None = None
        """The destination's endpoint (None: not attached yet); refreshed once `replaced`."""
        self.last = 0.0
        """When the latest message along this route arrives: none may arrive before it."""


class _Link:
    """The state of one direction between two hosts, while a fault changes it."""

    __slots__ = ("extra_latency", "held", "holds", "jitter", "waiting")

    def __init__(self) -> None:
        self.extra_latency = 0.0
        self.jitter = 0.0
        self.held = False
        self.holds = 0
        self.waiting: list[_Message] = []


class SimTransport(Transport):
    """A simulated proc's endpoint on the `SimNetwork` (in slots: every message reads some)."""

    __slots__ = (
        "cpu",
        "held_in",
        "held_out",
        "host",
        "network",
        "nic",
        "on_frames",
        "on_loss",
        "on_message",
        "pauses",
        "proc_id",
        "replaced",
        "routes",
        "slowness",
        "state",
    )

    memory_backend = "sim"
    memory_one_sided = True

    def __init__(
        self, network: SimNetwork, proc_id: str, host: str, routes: dict[str, _Route]
    ) -> None:
        self.network = network
        self.proc_id = proc_id
        self.host = host
        self.nic = network.hosts[host]
        """The host's queues this proc's messages go through."""
        self.routes = routes
        """This proc's routes, by destination (kept for its proc id across attachments)."""
        self.replaced = False
        """Another endpoint was attached under this proc id: messages go to that one."""
        self.state = ProcState.BOOTING
        self.on_frames: FrameHandler | None = None
        self.on_message: MessageHandler | None = None
        self.on_loss: LossHandler | None = None
        self.pauses = 0
        self.slowness = 0.0
        self.cpu: _Cpu | None = None
        """Its CPU, once a fault has slowed it (None: handling costs nothing)."""
        self.held_in: list[_Message] = []
        self.held_out: list[_Message] = []

    def start(
        self,
        on_frames: FrameHandler,
        on_loss: LossHandler,
        on_refused: RefusalHandler,
        on_message: MessageHandler,
    ) -> None:
        """Begin delivering (the simulated network refuses no message: senders check the
        job's ``max_message_bytes``)."""
        self.on_frames = on_frames
        self.on_message = on_message
        self.on_loss = on_loss

    def send(self, dest: str, frames: Sequence[Buffer]) -> None:
        copied = copy_frames(frames)
        self.network.dispatch(self, _Message(self.proc_id, dest, copied, sum(map(len, copied))))

    def send_message(self, dest: str, envelope: Envelope, payload: Sequence[Buffer]) -> None:
        """Send the envelope as it is: every proc lives in this OS process, and an envelope is
        immutable (the payload is copied as `send` copies it)."""
        copied = copy_frames(payload)
        size = header_bytes(envelope) + sum(map(len, copied))
        message = _Message(self.proc_id, dest, copied, size, envelope=envelope)
        self.network.dispatch(self, message)

    def watch(self, proc: str) -> None:
        self.network.watch(self.proc_id, proc)

    def register(self, buffer: memoryview) -> MemoryHandle:
        return self.network.register(self.proc_id, buffer)

    def unregister(self, handle: MemoryHandle) -> None:
        self.network.unregister(handle)

    async def read(self, handle: MemoryHandle, offset: int, dst: memoryview) -> None:
        await self.network.memory_op(self.proc_id, handle, offset, dst, write=False)

    async def write(self, handle: MemoryHandle, offset: int, src: memoryview) -> None:
        await self.network.memory_op(self.proc_id, handle, offset, src, write=True)

    def close(self) -> None:
        self.network.down(self.proc_id, "stopped", stopped=True)


class SimNetwork:
    """Every simulated proc's transport, and the links between them."""

    def __init__(
        self,
        timeline: Timeline,
        loop: asyncio.AbstractEventLoop,
        model: NetworkModel,
        rng: random.Random,
        trace: Trace,
    ) -> None:
        self.timeline = timeline
        self.loop = loop
        self.model = model
        self.rng = rng
        self.trace = trace
        self.hosts: dict[str, _Host] = {}
        self.endpoints: dict[str, SimTransport] = {}
        self._waiting: dict[str, list[_Message]] = {}
        self._memory: dict[tuple[str, int], memoryview] = {}
        self._memory_keys = itertools.count(1)
        self._memory_ops: dict[str, list[_MemoryOp]] = {}
        self._routes: dict[str, dict[str, _Route]] = {}
        """Per sender, then per destination: its `_Route`."""
        self._watchers: dict[str, dict[str, None]] = {}
        self._losses: dict[str, ProcLoss] = {}
        self.on_silent: Callable[[str], None] | None = None
        self.controller_host: str | None = None
        self.extra_delay: Callable[[], float] | None = None
        """An extra latency for each message (schedule exploration), or None."""
        self._jitter_rate = 1.0 / model.jitter if model.jitter > 0 else 0.0
        self._arrival = self._arrive
        """The handler of every message's arrival, bound once rather than for each message."""

    def add_host(self, name: str) -> None:
        self.hosts[name] = _Host(name)

    def endpoints_on(self, host: str) -> dict[str, SimTransport]:
        """The procs of ``host``, whatever their state, by proc id."""
        nic = self.hosts.get(host)
        return nic.endpoints if nic is not None else {}

    def attach(self, proc: str, host: str) -> SimTransport:
        previous = self.endpoints.get(proc)
        if previous is not None:
            del previous.nic.endpoints[proc]
            previous.replaced = True
        endpoint = SimTransport(self, proc, host, self._routes.setdefault(proc, {}))
        self.endpoints[proc] = endpoint
        endpoint.nic.endpoints[proc] = endpoint
        return endpoint

    def up(self, proc: str) -> None:
        """``proc`` has booted: deliver what waited for it, in order."""
        self.endpoints[proc].state = ProcState.UP
        for message in self._waiting.pop(proc, ()):
            self._reschedule(message)

    def down(self, proc: str, reason: str, **details: Any) -> None:
        """``proc`` is gone: its watchers (and later senders) are told."""
        endpoint = self.endpoints.get(proc)
        if endpoint is None or endpoint.state is ProcState.DOWN:
            return
        endpoint.state = ProcState.DOWN
        loss = ProcLoss(proc, reason, host=endpoint.host, **details)
        self._losses[proc] = loss
        self.trace.record(ev.Down(proc=proc, reason=reason))
        for watcher in self._watchers.pop(proc, {}):
            self._notify(watcher, loss)
        for key in [k for k in self._memory if k[0] == proc]:
            del self._memory[key]
        error = memory_owner_lost(loss)
        for op in self._memory_ops.pop(proc, ()):
            if not op.future.done():
                op.future.set_exception(error)

    def pause(self, proc: str) -> Heal:
        """``proc`` stops answering: nothing in or out until resumed.

        Like a process under SIGSTOP, it is declared lost (and killed) once it has
        been silent for the model's ``heartbeat_timeout``.
        """
        heal = partial(self.resume, proc)
        endpoint = self.endpoints.get(proc)
        if endpoint is None or endpoint.state is not ProcState.UP:
            return heal
        endpoint.state = ProcState.PAUSED
        endpoint.pauses += 1
        episode = endpoint.pauses
        self.trace.record(ev.Pause(proc=proc))

        def silent(_: object) -> None:
            if endpoint.state is ProcState.PAUSED and endpoint.pauses == episode and self.on_silent:
                self.on_silent(proc)

        self.timeline.call_later(self.model.heartbeat_timeout, silent)
        return heal

    def resume(self, proc: str) -> None:
        endpoint = self.endpoints.get(proc)
        if endpoint is None or endpoint.state is not ProcState.PAUSED:
            return
        endpoint.state = ProcState.UP
        self.trace.record(ev.Resume(proc=proc))
        held_in, endpoint.held_in = endpoint.held_in, []
        held_out, endpoint.held_out = endpoint.held_out, []
        for message in held_out:
            self.send(message)
        for message in held_in:
            self._arrive(message)

    def slow(self, proc: str, seconds: float) -> Heal:
        """Every message to or from ``proc`` takes ``seconds`` longer."""
        endpoint = self.endpoints[proc]
        endpoint.slowness += seconds

        def heal() -> None:
            endpoint.slowness = max(0.0, endpoint.slowness - seconds)

        return heal

    def slow_cpu(self, proc: str, factor: float) -> Heal:
        """``proc``'s CPU runs ``factor`` (>= 1) times slower: each message sent to it from now
        on waits for the CPU, then takes ``(factor - 1) * handling`` seconds longer."""
        endpoint = self.endpoints[proc]
        cpu = endpoint.cpu
        if cpu is None:
            cpu = endpoint.cpu = _Cpu()
        handling = self.model.handling

        def set_factor(new: float) -> None:
            cpu.factor = new
            cpu.cost = (new - 1.0) * handling

        set_factor(cpu.factor * factor)
        return lambda: set_factor(cpu.factor / factor)

    def bandwidth(self, host: str, factor: float) -> Heal:
        """``host``'s NIC runs at ``factor`` (> 0) of its bandwidth."""
        nic = self.hosts[host]
        nic.bandwidth_factor *= factor

        def heal() -> None:
            nic.bandwidth_factor /= factor

        return heal

    def delay(self, src_host: str, dst_host: str, seconds: float) -> Heal:
        """Messages from ``src_host`` to ``dst_host`` take ``seconds`` longer, plus jitter."""
        link = self._link(src_host, dst_host)
        link.extra_latency += seconds
        link.jitter += seconds / 2

        def heal() -> None:
            link.extra_latency = max(0.0, link.extra_latency - seconds)
            link.jitter = max(0.0, link.jitter - seconds / 2)

        return heal

    def _link(self, src_host: str, dst_host: str) -> _Link:
        return self.hosts[src_host].links.setdefault(dst_host, _Link())

    def hold(self, src_host: str, dst_host: str) -> Heal:
        """Traffic from ``src_host`` to ``dst_host`` waits until healed (a clog or partition)."""
        heal = partial(self._release, src_host, dst_host)
        link = self._link(src_host, dst_host)
        if link.held:
            return heal
        link.held = True
        link.holds += 1
        episode = link.holds
        if self.controller_host in (src_host, dst_host) and src_host != dst_host:
            far = dst_host if src_host == self.controller_host else src_host

            def cut_off(_: object) -> None:
                if link.held and link.holds == episode and self.on_silent is not None:
                    for proc, endpoint in list(self.endpoints_on(far).items()):
                        if endpoint.state in LIVE:
                            self.on_silent(proc)

            self.timeline.call_later(self.model.heartbeat_timeout, cut_off)
        return heal

    def _release(self, src_host: str, dst_host: str) -> None:
        link = self._link(src_host, dst_host)
        if not link.held:
            return
        link.held = False
        waiting, link.waiting = link.waiting, []
        for message in waiting:
            self._reschedule(message)

    def watch(self, watcher: str, proc: str) -> None:
        loss = self._losses.get(proc)
        if loss is not None:
            self._notify(watcher, loss)
        else:
            self._watchers.setdefault(proc, {})[watcher] = None

    def _notify(self, watcher: str, loss: ProcLoss) -> None:
        endpoint = self.endpoints.get(watcher)
        if endpoint is None or endpoint.state is ProcState.DOWN or endpoint.on_loss is None:
            return
        self.timeline.call_later(
            self.model.detect_crash, lambda _: self.loop.call_soon(endpoint.on_loss, loss)
        )

    def send(self, message: _Message) -> None:
        self.dispatch(self.endpoints[message.src], message)

    def dispatch(self, sender: SimTransport, message: _Message) -> None:
        """Put ``message`` from ``sender`` on its way, or hold it until both ends can take it."""
        state = sender.state
        if state is not _UP:
            if state is _PAUSED:
                sender.held_out.append(message)
                return
            if state is _DOWN:
                return
        route = sender.routes.get(message.dst)
        receiver = None if route is None else route.receiver
        if receiver is None or receiver.replaced:
            route = self._route(sender, message.dst)
            receiver = route.receiver
        state = None if receiver is None else receiver.state
        if state is _UP or state is _PAUSED:
            self._schedule(message, sender, route)
        elif state is _DOWN:
            self.watch(message.src, message.dst)
        else:
            self._waiting.setdefault(message.dst, []).append(message)

    def _route(self, sender: SimTransport, dst: str) -> _Route:
        """``sender``'s route to ``dst``, made if new, to the endpoint attached as ``dst`` now."""
        route = sender.routes.get(dst)
        if route is None:
            route = sender.routes[dst] = _Route()
        route.receiver = self.endpoints.get(dst)
        return route

    def _reschedule(self, message: _Message) -> None:
        """Put ``message``, which waited for its link or its receiver, on its way now."""
        sender = self.endpoints[message.src]
        self._schedule(message, sender, self._route(sender, message.dst))

    def _schedule(self, message: _Message, sender: SimTransport, route: _Route) -> None:
        """Put ``message`` on its way along ``route``, whose receiver is attached."""
        # Every message comes here: the queues' `free_at` and the exponential draws of
        # jitter (``random.expovariate``'s formula) are computed inline, not by a call each.
        receiver: SimTransport = route.receiver  # type: ignore[assignment]
        model = self.model
        now = self.timeline.now
        size = message.size
        src_host, dst_host = sender.nic, receiver.nic
        if src_host is dst_host:
            queue = src_host.bus
            free = queue.free_at
            queue.free_at = (now if now > free else free) + (
                model.per_message + size / model.local_bandwidth
            )
            arrival = queue.free_at + model.local_latency
        else:
            links = src_host.links
            link = links.get(dst_host.name) if links else None
            if link is not None and link.held:
                link.waiting.append(message)
                return
            tx = src_host.tx
            free = tx.free_at
            tx.free_at = (now if now > free else free) + (
                model.per_message + size / (model.bandwidth * src_host.bandwidth_factor)
            )
            delay = model.latency
            if self._jitter_rate:
                delay += -log(1.0 - self.rng.random()) / self._jitter_rate
            if link is not None:
                delay += link.extra_latency
                if link.jitter > 0:
                    delay += -log(1.0 - self.rng.random()) / (1.0 / link.jitter)
            reached = tx.free_at + delay
            queue = dst_host.rx
            free = queue.free_at
            queue.free_at = (reached if reached > free else free) + size / (
                model.bandwidth * dst_host.bandwidth_factor
            )
            arrival = queue.free_at
        slowness = sender.slowness + receiver.slowness
        if slowness:
            arrival += slowness
        if self.extra_delay is not None:
            arrival += self.extra_delay()
        cpu = receiver.cpu
        if cpu is not None and message.deliver is None:  # one-sided RDMA spares the CPU
            if arrival < cpu.free_at:
                arrival = cpu.free_at
            arrival += cpu.cost
            cpu.free_at = arrival
        if arrival < route.last:
            arrival = route.last
        route.last = arrival
        message.receiver = receiver
        self.timeline.through(queue.lane, arrival, self._arrival, message)

    def _arrive(self, message: _Message) -> None:
        # Runs inside the loop's advance of the timeline, on the loop thread: the
        # receive callback only routes the message and schedules whatever must run.
        endpoint: SimTransport = message.receiver  # type: ignore[assignment]
        if endpoint.replaced:
            endpoint = self.endpoints[message.dst]
        if endpoint.state is _PAUSED:
            endpoint.held_in.append(message)
        elif endpoint.state is _UP:
            if message.envelope is not None:
                if endpoint.on_message is not None:
                    endpoint.on_message(message.src, message.envelope, message.frames)
            elif message.deliver is not None:
                message.deliver()
            elif endpoint.on_frames is not None:
                endpoint.on_frames(message.src, message.frames)

    def register(self, proc: str, view: memoryview) -> MemoryHandle:
        key = next(self._memory_keys)
        self._memory[(proc, key)] = view
        return MemoryHandle(proc, key, view.nbytes, "sim")

    def unregister(self, handle: MemoryHandle) -> None:
        self._memory.pop((handle.owner, handle.key), None)

    def memory_op(
        self, requester: str, handle: MemoryHandle, offset: int, view: memoryview, write: bool
    ) -> asyncio.Future[None]:
        """Read (or write) ``view`` from (or to) remote memory, as one-sided RDMA would:
        a request crosses to the owner's NIC, the data crosses back (or there), and
        no actor of the owner takes part."""
        future: asyncio.Future[None] = self.loop.create_future()
        op = _MemoryOp(future, handle, offset, view, write)
        owner = handle.owner
        if owner in self._losses:
            future.set_exception(memory_owner_lost(self._losses[owner]))
            return future
        self._memory_ops.setdefault(owner, []).append(op)
        data = bytes(view) if write else b""
        request = REQUEST_BYTES + len(data)
        self.send(
            _Message(requester, owner, None, request, partial(self._serve, requester, op, data))
        )
        return future

    def _serve(self, requester: str, op: _MemoryOp, data: bytes) -> None:
        """At the owner: copy the bytes now, and send the answer back."""
        memory = self._memory.get((op.handle.owner, op.handle.key))
        end = op.offset + op.view.nbytes
        if memory is None:
            answer, size = RuntimeError("the RDMA buffer was dropped by its owner"), REQUEST_BYTES
        elif op.write:
            memory[op.offset : end] = data
            answer, size = None, REQUEST_BYTES
        else:
            answer, size = bytes(memory[op.offset : end]), op.view.nbytes
        self.send(
            _Message(op.handle.owner, requester, None, size, partial(self._complete, op, answer))
        )

    def _complete(self, op: _MemoryOp, answer: bytes | BaseException | None) -> None:
        ops = self._memory_ops.get(op.handle.owner, [])
        if op in ops:
            ops.remove(op)
        if op.future.done():
            return
        if isinstance(answer, BaseException):
            op.future.set_exception(answer)
            return
        if answer is not None:
            op.view[:] = answer
        op.future.set_result(None)
