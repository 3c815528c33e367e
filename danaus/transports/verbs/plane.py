"""The verbs data plane of one proc: a message channel and memory channels per peer.

Everything here runs on the proc's I/O thread (`send`, `forget` and `stop`
hop onto it), beside tcp's control sockets, which carry the set-up messages of
`danaus.transports.verbs.setup`. Channels are made when first needed:
a message channel when either side first sends to the other (if both offer at
once, the offer of the proc with the smaller id wins), a memory channel when
this proc first reads or writes a peer's memory.

A channel that fails tells the transport the peer is unreachable
(``unreachable(peer, reason)``); the transport has the controller decide who
is lost. Memory channels are replaced after errors that concern one transfer
(a remote access error, a transfer given up).
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from danaus.core.settings import Limits
from danaus.core.transport import ProcLoss, memory_owner_lost
from danaus.transports.tcp.ioloop import IoLoop
from danaus.transports.verbs import setup
from danaus.transports.verbs.channel import POLL_INTERVAL, Channel, Context
from danaus.transports.verbs.device import Device, DeviceError, Timeouts
from danaus.transports.verbs.memory import (
    LocalBuffers,
    MemoryChannel,
    Operation,
    ResponderChannel,
    finish,
)
from danaus.transports.verbs.messages import RECEIVES, MessageChannel
from danaus.transports.verbs.registrations import Registrations

log = logging.getLogger("danaus.verbs")

LINGER = 2.0
"""Seconds a stopping plane gives what it sent to arrive (and large frames to be read)."""


@dataclass
class _Peer:
    name: str
    messages: MessageChannel | None = None
    memory: MemoryChannel | None = None
    served: ResponderChannel | None = None
    parked: list[Operation] = field(default_factory=list)
    """Transfers waiting for the peer, found unreachable, to be declared lost."""
    unreachable: bool = False
    generations: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def channels(self) -> list[Channel]:
        return [c for c in (self.messages, self.memory, self.served) if c is not None]


class VerbsPlane:
    """The verbs endpoints of one proc. Thread-safe: `send`, `resolved`, `forget`, `stop`."""

    def __init__(
        self,
        proc: str,
        io: IoLoop,
        device: Device,
        registrations: Registrations,
        timeouts: Timeouts,
        limits: Limits,
        receive: Callable[[str, list[Any]], None],
        send_setup: Callable[[str, setup.Setup], None],
        unreachable: Callable[[str, str], None],
        refused: Callable[[str, list[Any], str], None],
    ) -> None:
        self.context = Context(proc, io, device, registrations, timeouts)
        self.device = device
        self.registrations = registrations
        self.buffers = LocalBuffers(proc, registrations, "verbs")
        self.address = device.port.describe()
        self._limits = limits
        self._receive = receive
        self._refused = refused
        self._send_setup = send_setup
        self._unreachable = unreachable
        self._peers: dict[str, _Peer] = {}
        self._forgotten: set[str] = set()
        self._polling = False
        self._closed = False

    @property
    def _proc(self) -> str:
        return self.context.proc

    def start(self) -> None:
        """Channels are made on first use; nothing to do."""

    def send(self, dest: str, message: list[Any]) -> None:
        """Queue ``message`` (kind frame first) for ``dest``."""
        self.context.io.call_soon(self._send, dest, message)

    def resolved(self, dest: str) -> None:
        """Peers are reached by the endpoints they offer, not by their published address."""

    def forget(self, dest: str) -> None:
        """``dest`` is lost: close its channels and drop what waits for it."""
        if self.context.io.in_thread():
            self._forget(dest)
        else:
            self.context.io.call_soon(self._forget, dest)

    async def drain(self, timeout: float) -> None:
        """Nothing to wait for here: `stop` lets what was sent arrive."""

    def stop(self) -> None:
        """Let what was sent arrive (up to `LINGER` seconds), then close everything."""
        done = threading.Event()
        self.context.io.call_soon(self._drain, time.monotonic() + LINGER, done)
        if not done.wait(LINGER + 1):
            log.warning("verbs: proc %s stopped before its plane closed", self._proc)

    def handle(self, src: str, message: setup.Setup) -> None:
        """A set-up message from member ``src``."""
        if src in self._forgotten or self._closed:
            return
        if isinstance(message, setup.Offer):
            self._offered(src, message)
        elif isinstance(message, setup.Accept):
            self._accepted(src, message)
        elif isinstance(message, setup.Ready):
            self._ready(src, message)
        elif isinstance(message, setup.Drop):
            self.buffers.unregister(message.key)

    def start_operation(self, operation: Operation) -> None:
        """Begin an RDMA read or write of ``operation.handle``'s owner's memory."""
        peer = self._peer(operation.handle.owner)
        if peer.unreachable:
            peer.parked.append(operation)
            return
        try:
            channel = self._memory(peer)
        except DeviceError as exc:
            finish(self.registrations, operation, exc)
            return
        channel.submit(operation)

    def abort(self, operation: Operation) -> None:
        """Give ``operation`` up; when this returns the device writes nothing more for it."""
        peer = self._peers.get(operation.handle.owner)
        if peer is not None and operation in peer.parked:
            peer.parked.remove(operation)
        elif peer is not None and peer.memory is not None:
            peer.memory.abort(operation)
        finish(self.registrations, operation, None)

    def lost(self, loss: ProcLoss) -> None:
        """``loss.proc`` is gone: its channels close, transfers with it fail."""
        peer = self._peers.get(loss.proc)
        operations = (
            []
            if peer is None
            else peer.parked + (peer.memory.operations() if peer.memory is not None else [])
        )
        self._forget(loss.proc)
        error = memory_owner_lost(loss)
        for operation in operations:
            finish(self.registrations, operation, error)

    def _send(self, dest: str, message: list[Any]) -> None:
        if dest in self._forgotten or self._closed:
            return
        peer = self._peer(dest)
        if peer.unreachable:
            return
        try:
            channel = self._messages(peer)
        except DeviceError as exc:
            self._channel_failed(dest, f"no message channel could be made: {exc}")
            return
        channel.send(message)

    def _peer(self, name: str) -> _Peer:
        peer = self._peers.get(name)
        if peer is None:
            peer = self._peers[name] = _Peer(name)
        return peer

    def _messages(self, peer: _Peer) -> MessageChannel:
        """The message channel to ``peer``, offered now if there is none."""
        channel = peer.messages
        if channel is None:
            channel = peer.messages = self._message_channel(peer.name, next(peer.generations))
            self._offer(peer.name, setup.MESSAGES, channel, RECEIVES)
        return channel

    def _message_channel(self, peer: str, generation: int) -> MessageChannel:
        channel = MessageChannel(
            self.context,
            peer,
            generation,
            deliver=self._receive,
            refused=self._refused,
            unreachable=self._channel_failed,
            limits=self._limits,
        )
        self._watch(channel)
        return channel

    def _memory(self, peer: _Peer) -> MemoryChannel:
        """The memory channel to ``peer``, offered now if there is none."""
        channel = peer.memory
        if channel is None or channel.state == "closed":
            channel = peer.memory = MemoryChannel(
                self.context,
                peer.name,
                next(peer.generations),
                replaced=self._replaced,
                unreachable=self._channel_failed,
            )
            self._watch(channel)
            self._offer(peer.name, setup.MEMORY, channel, 0)
        return channel

    def _offer(self, peer: str, kind: setup.Channel, channel: Channel, receives: int) -> None:
        self._send_setup(peer, setup.Offer(kind, channel.generation, channel.endpoint(), receives))

    def _offered(self, src: str, offer: setup.Offer) -> None:
        peer = self._peer(src)
        if offer.channel == setup.MEMORY:
            if peer.served is not None:
                peer.served.close()
            try:
                served = peer.served = ResponderChannel(self.context, src, offer.generation)
                self._watch(served)
                served.connect(offer.endpoint, "ready")
            except DeviceError as exc:
                log.error(
                    "verbs: proc %s cannot serve %s's memory channel: %s", self._proc, src, exc
                )
                return
            accept = setup.Accept(setup.MEMORY, offer.generation, served.endpoint(), 0)
            self._send_setup(src, accept)
            return
        if not 3 <= offer.receives <= 1 << 16:
            log.error("verbs: %s offered a message channel with %d receives", src, offer.receives)
            return
        current = peer.messages
        if current is not None:
            if current.state != "offered" or self._proc < src:
                return  # ours wins, or the channel is up already
            peer.messages = None
            queued = current.take_queue()
            current.close()
        else:
            queued = []
        try:
            channel = peer.messages = self._message_channel(src, offer.generation)
            channel.connect(offer.endpoint, "accepted")
        except DeviceError as exc:
            self._channel_failed(src, f"its message channel could not be connected: {exc}")
            return
        for message in queued:
            channel.send(message)
        channel.credits.available = offer.receives
        accept = setup.Accept(setup.MESSAGES, offer.generation, channel.endpoint(), RECEIVES)
        self._send_setup(src, accept)

    def _accepted(self, src: str, accept: setup.Accept) -> None:
        peer = self._peers.get(src)
        if peer is None:
            return
        if accept.channel == setup.MEMORY:
            memory = peer.memory
            waiting = memory is not None and memory.state == "offered"
            if waiting and memory.generation == accept.generation:
                try:
                    memory.connect(accept.endpoint, "accepted")
                except DeviceError as exc:
                    memory.broken(f"connecting it failed: {exc}")
                    return
                memory.ready()
            return
        channel = peer.messages
        if channel is None or channel.state != "offered":
            return
        if channel.generation != accept.generation or not 3 <= accept.receives <= 1 << 16:
            return
        try:
            channel.connect(accept.endpoint, "accepted")
        except DeviceError as exc:
            channel.broken(f"connecting it failed: {exc}")
            return
        self._send_setup(src, setup.Ready(setup.MESSAGES, accept.generation))
        channel.credits.available = accept.receives
        channel.ready()

    def _ready(self, src: str, ready: setup.Ready) -> None:
        peer = self._peers.get(src)
        channel = peer.messages if peer is not None else None
        waiting = channel is not None and channel.state == "accepted"
        if waiting and channel.generation == ready.generation:
            channel.ready()

    def _channel_failed(self, peer: str, reason: str) -> None:
        found = self._peers.get(peer)
        if found is not None:
            found.unreachable = True
        self._unreachable(peer, reason)

    def _replaced(self, channel: MemoryChannel, operations: list[Operation], fatal: bool) -> None:
        peer = self._peers.get(channel.peer)
        if peer is None:
            return
        if peer.memory is channel:
            peer.memory = None
        if fatal or peer.unreachable:
            peer.parked += operations
            return
        for operation in operations:
            self.start_operation(operation)

    def _forget(self, dest: str) -> None:
        self._forgotten.add(dest)
        peer = self._peers.pop(dest, None)
        if peer is not None:
            for channel in peer.channels():
                channel.close()

    def _watch(self, channel: Channel) -> None:
        """Poll ``channel`` on a timer if its completions raise no events."""
        if channel.polled and not self._polling:
            self._polling = True
            self.context.io.call_later(POLL_INTERVAL, self._poll)

    def _poll(self) -> None:
        for peer in list(self._peers.values()):
            for channel in peer.channels():
                channel.poll()
        if not self._closed:
            self.context.io.call_later(POLL_INTERVAL, self._poll)

    def _drain(self, deadline: float, done: threading.Event) -> None:
        busy = [
            peer.name
            for peer in self._peers.values()
            if peer.messages is not None
            and peer.messages.state != "closed"
            and not peer.messages.idle()
        ]
        if busy and time.monotonic() < deadline:
            self.context.io.call_later(0.005, lambda: self._drain(deadline, done))
            return
        if busy:
            log.warning(
                "verbs: proc %s stopped with messages for %s not delivered after %.1f s",
                self._proc,
                ", ".join(busy),
                LINGER,
            )
        self._close()
        done.set()

    def _close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for peer in self._peers.values():
            for channel in peer.channels():
                channel.close()
        self._peers.clear()
        self.buffers.close()
        self.registrations.close()
        self.device.close()
