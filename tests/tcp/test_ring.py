"""The shared-memory ring of a local data connection, on its own: placement, space, checks."""

from __future__ import annotations

import fcntl
import hashlib
import os
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from danaus import Actor, context, endpoint, this_host
from danaus.core.settings import MiB
from danaus.transports.tcp import ring
from danaus.transports.tcp.buffers import BufferCache
from danaus.transports.tcp.records import (
    LENGTH,
    RING_RECORD,
    Assembly,
    Cipher,
    RecordError,
    in_ring,
    message_records,
)

pytestmark = pytest.mark.skipif(not ring.SUPPORTED, reason="rings are used on x86-64 only")

KEY = bytes(range(32))
SIZE = ring.MIN_RING_BYTES


def pair(size: int = SIZE) -> tuple[ring.Producer, ring.Consumer]:
    producer, fd = ring.create(size)
    return producer, ring.accept(fd)


def memfd(size: int, seals: int | None = ring.SEALS) -> int:
    fd = os.memfd_create("test-ring", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, size)
    if seals is not None:
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
    return fd


def _file() -> int:
    """A descriptor of an ordinary (unlinked) file of the ring's size."""
    fd, path = tempfile.mkstemp()
    os.unlink(path)
    os.ftruncate(fd, ring.HEADER_BYTES + SIZE)
    return fd


def is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def test_a_record_that_would_cross_the_end_starts_at_the_start_and_the_tail_counts_as_used():
    assert ring.place(0, 100, 1000) == (0, 100)
    assert ring.place(900, 100, 1000) == (900, 1000), "a record may end exactly at the end"
    assert ring.place(950, 100, 1000) == (0, 1100)
    assert ring.place(2950, 100, 1000) == (0, 3100)
    assert ring.place(3100, 1000, 1000) == (0, 5000), "a whole-ring record skips the tail"


def test_the_sender_places_records_only_in_the_space_the_receiver_released():
    producer, consumer = pair()
    slots = [producer.slot(20_000) for _ in range(3)]
    assert all(slot is not None for slot in slots)
    assert producer.slot(20_000) is None, "a fourth does not fit"
    assert producer.slot(SIZE + 1) is None, "nor does a record larger than the ring"
    for number, slot in enumerate(slots):
        slot[:] = bytes([number]) * 20_000
    del slots, slot
    consumer.record(20_000)
    consumer.release()
    assert producer.slot(25_000) is None, "25000 bytes are free, but not with the skipped tail"
    assert bytes(consumer.record(20_000)) == bytes([1]) * 20_000
    consumer.release()
    wrapped = producer.slot(25_000)
    assert wrapped is not None and producer.produced == SIZE + 25_000
    wrapped[:] = b"w" * 25_000
    del wrapped
    assert bytes(consumer.record(20_000)) == bytes([2]) * 20_000
    consumer.release()
    assert bytes(consumer.record(25_000)) == b"w" * 25_000, "both sides wrap by the same rule"
    consumer.release()
    assert consumer.consumed == producer.produced
    producer.close()
    consumer.close()


@pytest.mark.parametrize("claim", ["backwards", "ahead"])
def test_a_receiver_position_it_cannot_have_reached_breaks_the_ring(claim):
    producer, consumer = pair()
    producer.slot(1000)
    consumer.record(1000)
    consumer.release()
    producer.slot(1000)  # reads the released position
    consumer._word.value = 10 if claim == "backwards" else producer.produced + 1
    with pytest.raises(ring.RingError, match="claims"):
        producer.slot(1000)
    producer.close()
    consumer.close()


def test_a_ring_record_larger_than_the_ring_is_refused():
    producer, consumer = pair()
    with pytest.raises(RecordError):
        consumer.record(SIZE + 1)
    producer.close()
    consumer.close()


@pytest.mark.parametrize(
    "make, reason",
    [
        (lambda: memfd(ring.HEADER_BYTES + SIZE, seals=None), "sealed"),
        (
            lambda: memfd(ring.HEADER_BYTES + SIZE, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW),
            "sealed",
        ),
        (lambda: memfd(ring.HEADER_BYTES + SIZE, ring.SEALS | fcntl.F_SEAL_WRITE), "sealed"),
        (lambda: memfd(ring.HEADER_BYTES + ring.MIN_RING_BYTES - 1), "bytes"),
        (lambda: memfd(ring.HEADER_BYTES + ring.MAX_RING_BYTES + 1), "bytes"),
        (_file, "not a memfd"),
        (lambda: os.pipe()[0], "not a memfd"),
    ],
    ids=["unsealed", "no-seal-seal", "write-sealed", "too-small", "too-large", "file", "pipe"],
)
def test_only_a_sealed_memfd_of_an_accepted_size_is_mapped_and_its_descriptor_is_closed(
    make, reason
):
    fd = make()
    with pytest.raises(ring.RingError, match=reason):
        ring.accept(fd)
    assert not is_open(fd)


def test_descriptors_are_closed_with_the_ring():
    def memfds() -> int:
        return sum(
            os.readlink(f"/proc/self/fd/{name}").startswith("/memfd:danaus-ring")
            for name in os.listdir("/proc/self/fd")
            if is_open(int(name))
        )

    before = set(os.listdir("/proc/self/fd"))
    producer, fd = ring.create()
    consumer = ring.accept(fd)
    assert not is_open(fd)
    assert memfds() == 2, "each mapping holds its own descriptor"
    slot = producer.slot(100)
    assert slot is not None
    slot[:] = b"x" * 100
    del slot
    view = consumer.record(100)
    assert bytes(view) == b"x" * 100
    del view
    consumer.release()
    producer.close()
    consumer.close()
    assert memfds() == 0
    # Other code of this process may close descriptors meanwhile, not open ring ones.
    assert set(os.listdir("/proc/self/fd")) <= before, "no descriptor is left behind"


frames = st.lists(st.binary(max_size=3000), min_size=1, max_size=4)


@settings(deadline=None, max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(frames, min_size=1, max_size=6),
    st.sampled_from([KEY, None]),
    st.integers(1, 2000),
    st.data(),
)
def test_records_mixing_ring_and_stream_put_back_together_are_the_messages(
    messages, key, chunk, data
):
    """The receiver lags behind by a random number of records: some find no room in the ring."""
    producer, consumer = pair()
    assembly = Assembly(Cipher(key), 1 << 16, 1 << 20, BufferCache(1 << 20))
    stream: list[bytes] = []
    arrived: list[list[bytes]] = []
    placed = 0

    def receive_one() -> None:
        record = stream.pop(0)
        head = record[: LENGTH.size]
        (length,) = LENGTH.unpack(head)
        if length & RING_RECORD:
            assert assembly.filling, "only chunks go in the ring"
            whole = assembly.opened(head, consumer.record(length & ~RING_RECORD))
            consumer.release()
        else:
            whole = assembly.opened(head, memoryview(bytearray(record[LENGTH.size :])))
        if whole is not None:
            arrived.append([bytes(frame) for frame in whole])

    sender = Cipher(key)
    for message in messages:
        for record in message_records(message, sender, chunk * 8, ring=producer.slot):
            flat = b"".join(bytes(buffer) for buffer in record)
            assert in_ring(record) == bool(LENGTH.unpack_from(flat)[0] & RING_RECORD)
            placed += in_ring(record)
            stream.append(flat)
            while stream and data.draw(st.booleans()):
                receive_one()
    while stream:
        receive_one()
    assert arrived == messages
    assert consumer.taken == placed == producer.placed
    assert consumer.consumed == producer.produced
    producer.close()
    consumer.close()


class Digest(Actor):
    @endpoint
    def digest(self, data: memoryview) -> tuple[int, str]:
        return memoryview(data).nbytes, hashlib.sha256(data).hexdigest()

    @endpoint
    def payload(self, size: int) -> bytes:
        return os.urandom(size)

    @endpoint
    def ring_records(self) -> int:
        """Records this proc took from the rings its peers share with it."""
        plane = context().actor_instance.runtime.transport.data
        return sum(i._ring.taken for i in list(plane._inbound) if i._ring is not None)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("encrypt", [True, False], ids=["encrypted", "clear"])
def test_large_messages_between_procs_of_one_host_go_through_the_ring(tcp, encrypt):
    tcp(encrypt=encrypt)
    mesh = this_host().spawn_procs(per_host={"w": 1}).spawn("digest", Digest)
    before = mesh.ring_records.call_one().get(timeout=30)
    for size in (MiB, 3 * MiB + 5, 9 * MiB + 7):
        data = os.urandom(size)
        assert mesh.digest.call_one(data).get(timeout=60) == (
            size,
            hashlib.sha256(data).hexdigest(),
        )
        result = mesh.payload.call_one(size).get(timeout=60)
        assert len(result) == size
    taken = mesh.ring_records.call_one().get(timeout=30) - before
    # Encrypted, each argument's first MiB is four 256 KiB records; in clear, the 1 MiB
    # argument is one record, and the larger ones are single records too long for the ring.
    assert taken >= (3 * 4 if encrypt else 1), f"only {taken} records came through the ring"
