"""The message channel to one peer: SENDs into receive buffers posted ahead, under credits.

Each side posts `RECEIVES` buffers of `BUFFER_BYTES` and keeps `SEND_SLOTS`
buffers to send from, all in one region registered once. Messages are cut
into SENDs as `danaus.transports.verbs.stream` describes; small messages
share a SEND. `danaus.transports.verbs.credits` keeps every SEND within a
buffer the peer has posted. A received SEND is copied out and its buffer
posted again at once, on the I/O thread, whatever the actors do. Frames above
`INLINE_LIMIT` are read by the receiver with RDMA READ on this queue pair
(at most `READS` at a time), from the sender's memory, registered through the
cache while the peer reads it.

Any failed work request on this channel (the peer stopped answering, or its
queue pair went to ERR) makes the peer unreachable: messages may have been
lost, so the channel is not repaired.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from danaus.core.settings import Limits
from danaus.transports.tcp.buffers import allocate
from danaus.transports.verbs.channel import Channel, Context
from danaus.transports.verbs.credits import Credits
from danaus.transports.verbs.device import Access, Completion, DeviceError, WcStatus, WrOpcode
from danaus.transports.verbs.registrations import Pin
from danaus.transports.verbs.stream import (
    FRAGMENT,
    Fragment,
    Incoming,
    Outgoing,
    Reassembly,
    RemoteFrame,
    StreamError,
)

log = logging.getLogger("danaus.verbs")

RECEIVES = 16
SEND_SLOTS = 16
BUFFER_BYTES = 16 << 10
INLINE_LIMIT = 32 << 10
READS = 16


@dataclass
class _Delivery:
    """A received message waiting for its large frames to be read, then its turn."""

    message: Incoming
    reads: int = 0
    pins: list[Pin] = field(default_factory=list)


class MessageChannel(Channel):
    """Messages both ways with one peer. All on the I/O thread."""

    kind = "message channel"

    def __init__(
        self,
        context: Context,
        peer: str,
        generation: int,
        *,
        deliver: Callable[[str, list[Any]], None],
        refused: Callable[[str, list[Any], str], None],
        unreachable: Callable[[str, str], None],
        limits: Limits,
    ) -> None:
        super().__init__(
            context,
            peer,
            generation,
            max_send=SEND_SLOTS + READS + 1,
            max_recv=RECEIVES,
            access=Access.LOCAL_WRITE | Access.REMOTE_READ,
        )
        self._deliver = deliver
        self._refused = refused
        self._unreachable = unreachable
        self._arena = allocate((RECEIVES + SEND_SLOTS) * BUFFER_BYTES)
        try:
            self._arena_pin = context.registrations.pin(
                self._arena, Access.LOCAL_WRITE, private=True
            )
        except DeviceError:
            Channel.close(self)
            raise
        self.credits = Credits(RECEIVES)
        self._free_slots = list(range(RECEIVES, RECEIVES + SEND_SLOTS))
        self._queue: deque[list[Any]] = deque()
        self._current: Outgoing | None = None
        self._awaiting_release: deque[list[Pin]] = deque()
        self._releases_owed = 0
        self._reassembly = Reassembly(limits.message_bytes, limits.message_limit)
        self._deliveries: deque[_Delivery] = deque()
        self._reads: deque[tuple[_Delivery, RemoteFrame, int, int]] = deque()
        self._reading: dict[int, _Delivery] = {}
        self._read_ids = RECEIVES + SEND_SLOTS
        for index in range(RECEIVES):
            self._post_receive(index)

    def ready(self) -> None:
        """Connected both ways: sending may start."""
        self.state = "ready"
        self._start_reads()
        self.pump()

    def send(self, message: list[Any]) -> None:
        self._queue.append(message)
        self.pump()

    def take_queue(self) -> list[list[Any]]:
        """The messages not started yet, taken away (to go on another channel)."""
        queued = list(self._queue)
        self._queue.clear()
        return queued

    def idle(self) -> bool:
        """Everything sent has arrived, and the peer has read every large frame."""
        waiting = self._queue or self._current is not None or self._awaiting_release
        return not waiting and len(self._free_slots) == SEND_SLOTS

    def pump(self) -> None:
        """Send what the credits and the free buffers allow, then an update if one is due."""
        if self.state != "ready":
            return
        while (
            self.state == "ready"
            and self._free_slots
            and (self._current or self._queue)
            and self.credits.can_send_data()
        ):
            slot = self._free_slots.pop()
            buffer = self._buffer(slot)
            written = FRAGMENT.size
            while written < BUFFER_BYTES and (self._current or self._queue):
                if self._current is None:
                    self._current = Outgoing(self._queue.popleft(), self._pin, INLINE_LIMIT)
                    if self._current.pins:
                        self._awaiting_release.append(self._current.pins)
                written += self._current.fill(buffer[written:])
                if self._current.done:
                    self._current = None
            self._post_fragment(slot, Fragment.DATA, written)
        releases = self._releases_owed and self.credits.available >= 1
        if self.state == "ready" and self._free_slots and (self.credits.update_due() or releases):
            self._post_fragment(self._free_slots.pop(), Fragment.UPDATE, FRAGMENT.size)

    def _pin(self, frame: memoryview) -> Pin | None:
        try:
            return self.context.registrations.pin(frame, Access.REMOTE_READ)
        except (DeviceError, TypeError) as exc:
            log.warning("verbs: a frame of %d bytes goes inline: %s", frame.nbytes, exc)
            return None

    def _post_fragment(self, slot: int, kind: Fragment, length: int) -> None:
        FRAGMENT.pack_into(self._buffer(slot), 0, kind, self.credits.take(), self._releases_owed)
        self._releases_owed = 0
        address = self._arena_pin.iova(slot * BUFFER_BYTES)
        self._post(self.qp.post_send, slot, WrOpcode.SEND, address, length, self._lkey)

    def _buffer(self, index: int) -> memoryview:
        return self._arena[index * BUFFER_BYTES : (index + 1) * BUFFER_BYTES]

    @property
    def _lkey(self) -> int:
        return self._arena_pin.lkey

    def _post(self, post: Callable[..., None], *args: Any) -> None:
        try:
            post(*args)
        except DeviceError as exc:
            self.broken(f"posting a work request failed: {exc}")

    def _post_receive(self, index: int) -> None:
        address = self._arena_pin.iova(index * BUFFER_BYTES)
        self._post(self.qp.post_recv, index, address, BUFFER_BYTES, self._lkey)

    def completed(self, completion: Completion) -> None:
        if completion.status is not WcStatus.SUCCESS:
            self.broken(f"a work request ended with {completion.status.name}")
        elif completion.wr_id < RECEIVES:
            self._received(completion.wr_id, completion.byte_len)
        elif completion.wr_id < RECEIVES + SEND_SLOTS:
            self._free_slots.append(completion.wr_id)
            self.pump()
        else:
            self._read(completion.wr_id)

    def _received(self, index: int, length: int) -> None:
        buffer = self._buffer(index)
        if length < FRAGMENT.size:
            self.broken(f"a fragment of {length} bytes")
            return
        kind, credits, released = FRAGMENT.unpack_from(buffer)
        if kind not in (Fragment.DATA, Fragment.UPDATE) or released > len(self._awaiting_release):
            self.broken("a fragment that breaks the protocol")
            return
        self.credits.returned(credits)
        for _ in range(released):
            for pin in self._awaiting_release.popleft():
                self.context.registrations.release(pin)
        try:
            arrived = self._reassembly.feed(buffer[FRAGMENT.size : length])
        except StreamError as exc:
            self.broken(str(exc))
            return
        self._post_receive(index)
        self.credits.reposted()
        try:
            for message in arrived:
                self._arrived(message)
        except DeviceError as exc:
            self.broken(f"registering memory for a message failed: {exc}")
            return
        self._start_reads()
        self._deliver_ready()
        self.pump()

    def _arrived(self, message: Incoming) -> None:
        delivery = _Delivery(message)
        self._deliveries.append(delivery)
        if message.error is not None:
            return
        for frame in message.remote:
            target = message.frames[frame.index]
            pin = self.context.registrations.pin(target, Access.LOCAL_WRITE, private=True)
            delivery.pins.append(pin)
            largest = self.context.device.port.max_message
            for start in range(0, frame.size, largest):
                self._reads.append((delivery, frame, start, min(largest, frame.size - start)))
                delivery.reads += 1

    def _start_reads(self) -> None:
        while self._reads and len(self._reading) < READS and self.state == "ready":
            delivery, frame, start, length = self._reads.popleft()
            pin = delivery.pins[delivery.message.remote.index(frame)]
            wr_id = self._read_ids
            self._read_ids += 1
            self._reading[wr_id] = delivery
            self._post(
                self.qp.post_send,
                wr_id,
                WrOpcode.RDMA_READ,
                pin.iova(start),
                length,
                pin.lkey,
                frame.address + start,
                frame.rkey,
            )

    def _read(self, wr_id: int) -> None:
        delivery = self._reading.pop(wr_id, None)
        if delivery is None:
            return
        delivery.reads -= 1
        self._start_reads()
        self._deliver_ready()
        self.pump()

    def _deliver_ready(self) -> None:
        """Hand over, in order, every message whose frames are all here."""
        while self._deliveries and self._deliveries[0].reads == 0:
            delivery = self._deliveries.popleft()
            for pin in delivery.pins:
                self.context.registrations.release(pin)
            message = delivery.message
            if message.remote:
                self._releases_owed += 1
            if message.error is not None:
                log.error(
                    "verbs: proc %s refused a message from %s: %s",
                    self.context.proc,
                    self.peer,
                    message.error,
                )
                self._refused(self.peer, message.frames, message.error)
            else:
                self._deliver(self.peer, message.frames)

    def broken(self, reason: str) -> None:
        super().broken(reason)
        self._unreachable(self.peer, f"its {self} failed: {reason}")

    def close(self) -> None:
        if self.state == "closed":
            return
        super().close()
        registrations = self.context.registrations
        for pins in self._awaiting_release:
            for pin in pins:
                registrations.release(pin)
        for delivery in self._deliveries:
            for pin in delivery.pins:
                registrations.release(pin)
        registrations.release(self._arena_pin)
        self._awaiting_release.clear()
        self._deliveries.clear()
        self._queue.clear()
        self._current = None
