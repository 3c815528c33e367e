"""RDMA buffers: one-sided reads and writes of registered memory, on every transport."""

from __future__ import annotations

import warnings
import zlib
from types import SimpleNamespace

import numpy as np
import pytest

from danaus import Actor, Channel, Port, SupervisionError, endpoint, this_host
from danaus.chaos import crash, pause, resume
from danaus.rdma import RDMAAction, RDMABuffer, RDMAFallbackWarning, backend
from tests.conformance.test_supervision import record_root_failures

MiB = 1 << 20


def checksum(data: object) -> int:
    return zlib.crc32(memoryview(np.ascontiguousarray(data)).cast("B"))


def tensor(dtype: str, count: int, seed: int):
    import torch

    generator = torch.Generator().manual_seed(seed)
    if dtype == "bool":
        return torch.randint(0, 2, (count,), generator=generator).bool()
    if dtype in ("int64", "uint8"):
        return torch.randint(0, 120, (count,), generator=generator).to(getattr(torch, dtype))
    return torch.rand(count, generator=generator).to(getattr(torch, dtype))


def tensor_checksum(t) -> int:
    import torch

    return zlib.crc32(t.contiguous().view(-1).view(torch.uint8).numpy().tobytes())


class Owner(Actor):
    """Owns memory and hands out buffers over it."""

    def __init__(self) -> None:
        self.memory: dict[str, object] = {}
        self.buffers: dict[str, RDMABuffer] = {}

    @endpoint
    def share_bytes(self, name: str, size: int, seed: int) -> tuple[RDMABuffer, int]:
        data = np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8)
        self.memory[name] = data
        self.buffers[name] = RDMABuffer(data)
        return self.buffers[name], checksum(data)

    @endpoint
    def share_tensor(self, name: str, dtype: str, count: int) -> tuple[RDMABuffer, int]:
        data = tensor(dtype, count, seed=count)
        self.memory[name] = data
        self.buffers[name] = RDMABuffer(data)
        return self.buffers[name], tensor_checksum(data)

    @endpoint
    def share_slices(self, parts: int, size: int) -> list[RDMABuffer]:
        data = np.zeros(parts * size, dtype=np.uint8)
        self.memory["slices"] = data
        return [RDMABuffer(data[i * size : (i + 1) * size]) for i in range(parts)]

    @endpoint
    def checksum_of(self, name: str) -> int:
        return checksum(self.memory[name])

    @endpoint
    def drop(self, name: str) -> None:
        self.buffers[name].drop().get()

    @endpoint
    def block_until_released(self, started: Port[Port[str]]) -> str:
        """Stay in this endpoint until the port it hands out is sent to."""
        release, waiter = Channel.open()
        started.send(release)
        return waiter.recv().get(timeout=120)

    @endpoint
    def slices(self) -> bytes:
        return bytes(self.memory["slices"])


class Reader(Actor):
    @endpoint
    def pull(self, buffer: RDMABuffer) -> int:
        out = np.empty(buffer.size(), dtype=np.uint8)
        buffer.read_into(out).get(timeout=120)
        return checksum(out)

    @endpoint
    def pull_tensor(self, buffer: RDMABuffer, dtype: str, count: int) -> int:
        import torch

        out = torch.empty(count, dtype=getattr(torch, dtype))
        buffer.read_into(out).get(timeout=120)
        return tensor_checksum(out)

    @endpoint
    def push(self, buffer: RDMABuffer, value: int) -> None:
        buffer.write_from(np.full(buffer.size(), value, dtype=np.uint8)).get(timeout=120)

    @endpoint
    def push_slice(self, buffers: list[RDMABuffer], index: int) -> int:
        buffer = buffers[index]
        buffer.write_from(np.full(buffer.size(), index + 1, dtype=np.uint8)).get(timeout=120)
        back = np.empty(buffer.size(), dtype=np.uint8)
        buffer.read_into(back).get(timeout=120)
        return int(back.sum())

    @endpoint
    def relay(self, buffer: RDMABuffer, next_reader: object) -> int:
        return next_reader.pull.call_one(buffer).get(timeout=120)


class Registrar(Actor):
    @endpoint
    def first_registration(self) -> tuple[str, bool, bool, str, str, list[str]]:
        """Register this process's first buffer; what the backend says, and what it warned."""
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            buffer = RDMABuffer(np.zeros(8, dtype=np.uint8))
        info = backend()
        warned = [str(w.message) for w in caught if w.category is RDMAFallbackWarning]
        return info.name, info.one_sided, info.fallback, buffer.backend, info.describe(), warned


def two_procs():
    procs = this_host().spawn_procs({"w": 2})
    return procs.slice(w=0).spawn("owner", Owner), procs.slice(w=1).spawn("reader", Reader)


@pytest.mark.parametrize("size", [1, 3, 4093, MiB + 7])
def test_bytes_round_trip(run, size):
    def main():
        owner, reader = two_procs()
        buffer, expected = owner.share_bytes.call_one("b", size, size).get()
        assert buffer.size() == size
        pulled = reader.pull.call_one(buffer).get()
        reader.push.call_one(buffer, 9).get()
        return expected, pulled, owner.checksum_of.call_one("b").get()

    expected, pulled, after_write = run(main)
    assert pulled == expected
    assert after_write == zlib.crc32(bytes([9]) * size)


TENSORS = [("float32", 1), ("float64", 1001), ("int64", 33), ("bfloat16", 4097), ("bool", 5)]


def test_tensor_round_trip(run_with_torch):
    def main():
        owner, reader = two_procs()
        results = []
        for dtype, count in TENSORS:
            buffer, expected = owner.share_tensor.call_one(dtype, dtype, count).get()
            results.append((expected, reader.pull_tensor.call_one(buffer, dtype, count).get()))
        return results

    for expected, pulled in run_with_torch(main):
        assert pulled == expected


def test_256_mib_round_trip(run):
    def main():
        owner, reader = two_procs()
        buffer, expected = owner.share_bytes.call_one("big", 256 * MiB, 1).get()
        pulled = reader.pull.call_one(buffer).get(timeout=300)
        reader.push.call_one(buffer, 3).get(timeout=300)
        return expected, pulled, owner.checksum_of.call_one("big").get(timeout=300)

    expected, pulled, after_write = run(main)
    assert pulled == expected
    assert after_write == zlib.crc32(bytes([3]) * 256 * MiB)


def test_reads_complete_while_the_owner_is_busy(run):
    def main():
        owner, reader = two_procs()
        buffer, expected = owner.share_bytes.call_one("b", MiB, 5).get()
        started, blocked = Channel.open()
        busy = owner.block_until_released.call_one(started)
        release = blocked.recv().get(timeout=60)
        pulled = reader.pull.call_one(buffer).get(timeout=60)
        assert not busy.done()
        release.send("go")
        return expected, pulled, busy.get(timeout=60)

    expected, pulled, answer = run(main)
    assert pulled == expected
    assert answer == "go"


def test_many_actors_write_distinct_slices_concurrently(run):
    def main():
        procs = this_host().spawn_procs({"w": 4})
        owner = procs.slice(w=0).spawn("owner", Owner)
        writers = procs.spawn("writers", Reader)
        buffers = owner.share_slices.call_one(4, 1000).get()
        sums = [
            f.get(timeout=60)
            for f in (writers.slice(w=i).push_slice.call_one(buffers, i) for i in range(4))
        ]
        return sums, owner.slices.call_one().get()

    sums, memory = run(main)
    assert sums == [1000 * (i + 1) for i in range(4)]
    assert memory == b"".join(bytes([i + 1]) * 1000 for i in range(4))


def test_a_dropped_buffer_cannot_be_read(run):
    def main():
        owner, reader = two_procs()
        buffer, _ = owner.share_bytes.call_one("b", 100, 1).get()
        owner.drop.call_one("b").get()
        with pytest.raises(Exception, match="dropped"):
            reader.pull.call_one(buffer).get(timeout=60)
        return True

    assert run(main)


def test_a_killed_owner_fails_the_transfer(run):
    """A read under way when its owner is killed fails. The kill is a signal from the owner's
    launcher (on a cluster, its host's agent), apart from the bytes: the read may also have
    completed just before it lands, and then holds the owner's bytes. Once the loss is known,
    every read fails."""

    def main():
        failures = record_root_failures()
        owner, _ = two_procs()
        buffer, expected = owner.share_bytes.call_one("big", 64 * MiB, 2).get()
        out = np.empty(buffer.size(), dtype=np.uint8)
        transfer = buffer.read_into(out, timeout=120)
        crash(owner)
        error = transfer.exception(timeout=120)
        lost = failures.recv().get(timeout=60).mesh_name
        with pytest.raises(SupervisionError):
            buffer.read_into(np.empty_like(out)).get(timeout=120)
        return lost, error, expected, checksum(out)

    lost, error, expected, arrived = run(main)
    assert lost == "owner"
    if error is None:
        assert arrived == expected
    else:
        assert isinstance(error, SupervisionError)


def test_bad_sizes_and_memory_raise_at_the_call_site(run):
    def main():
        owner, _ = two_procs()
        buffer, _ = owner.share_bytes.call_one("b", 100, 1).get()
        with pytest.raises(ValueError, match="needs 100 bytes"):
            buffer.read_into(np.empty(99, dtype=np.uint8))
        with pytest.raises(ValueError, match="101 bytes"):
            buffer.write_from(np.empty(101, dtype=np.uint8))
        with pytest.raises(ValueError, match="empty"):
            RDMABuffer(np.empty(0, dtype=np.uint8))
        with pytest.raises(ValueError, match="contiguous"):
            RDMABuffer(np.zeros((4, 4), dtype=np.uint8)[:, 1])
        with pytest.raises(ValueError, match="writable"):
            RDMABuffer(memoryview(b"read only"))
        with pytest.raises(TypeError):
            RDMABuffer("text")
        gpu = SimpleNamespace(device=SimpleNamespace(type="cuda"))
        with pytest.raises(ValueError, match="cannot reach cuda memory"):
            RDMABuffer(gpu)
        return backend().name

    assert run(main) in ("sim", "tcp", "ucx", "verbs")


def test_a_buffer_passed_through_two_hops_still_works(run):
    def main():
        procs = this_host().spawn_procs({"w": 3})
        owner = procs.slice(w=0).spawn("owner", Owner)
        first = procs.slice(w=1).spawn("first", Reader)
        second = procs.slice(w=2).spawn("second", Reader)
        buffer, expected = owner.share_bytes.call_one("b", 5000, 8).get()
        return expected, first.relay.call_one(buffer, second).get(timeout=60)

    expected, relayed = run(main)
    assert relayed == expected


def test_a_batch_of_transfers_runs_together(run):
    """Monarch's current names (``read_remote(dst, src)``, ``write_remote(dst, src)``) and the
    earlier ones (buffer first) do the same."""

    def main():
        owner, _ = two_procs()
        a, expected_a = owner.share_bytes.call_one("a", 3000, 1).get()
        b, _ = owner.share_bytes.call_one("b", 2000, 2).get()
        out_a = np.empty(3000, dtype=np.uint8)
        RDMAAction().read_into(a, out_a).write_from(b, np.full(2000, 4, np.uint8)).submit().get(
            timeout=60
        )
        old_names = checksum(out_a), owner.checksum_of.call_one("b").get()
        again = np.empty(3000, dtype=np.uint8)
        action = RDMAAction().read_remote(again, a).write_remote(b, np.full(2000, 5, np.uint8))
        action.submit().get(timeout=60)
        with pytest.raises(NotImplementedError):
            RDMAAction().fetch_add(a, 1)
        return expected_a, old_names, (checksum(again), owner.checksum_of.call_one("b").get())

    expected_a, old_names, new_names = run(main)
    assert old_names == (expected_a, zlib.crc32(bytes([4]) * 2000))
    assert new_names == (expected_a, zlib.crc32(bytes([5]) * 2000))


def test_a_timed_out_read_leaves_its_destination_alone(run):
    """64 MiB cannot arrive within 0.1 ms, even where a paused owner does not stop a transfer;
    whatever arrived by the timeout, nothing lands after it."""

    def main():
        owner, _ = two_procs()
        buffer, expected = owner.share_bytes.call_one("b", 64 * MiB, 6).get()
        late = np.zeros(buffer.size(), dtype=np.uint8)
        pause(owner)
        with pytest.raises(TimeoutError, match=r"within 0\.0001 s"):
            buffer.read_into(late, timeout=0.0001).get(timeout=60)
        at_timeout = checksum(late)
        resume(owner)
        fresh = np.zeros(buffer.size(), dtype=np.uint8)
        buffer.read_into(fresh).get(timeout=60)
        return expected, checksum(fresh), at_timeout, checksum(late)

    expected, fresh, at_timeout, after = run(main)
    assert fresh == expected
    assert after == at_timeout


def test_a_read_of_a_paused_owner_completes_or_times_out_cleanly(run):
    """Where transfers need the owner's CPU (a transport thread, or UCX emulating RMA over TCP), a
    paused owner makes a read time out, and its bytes never land after; where they do not (RDMA
    hardware, UCX's CMA between processes of a host), the read completes."""

    def main():
        owner, _ = two_procs()
        buffer, expected = owner.share_bytes.call_one("b", 4 * MiB, 6).get()
        late = np.zeros(buffer.size(), dtype=np.uint8)
        pause(owner)
        error = buffer.read_into(late, timeout=0.3).exception(timeout=60)
        resume(owner)
        fresh = np.zeros(buffer.size(), dtype=np.uint8)
        buffer.read_into(fresh).get(timeout=60)
        return expected, checksum(fresh), error, checksum(late), int(late.sum())

    expected, fresh, error, late_checksum, late_sum = run(main)
    assert fresh == expected
    if error is None:
        assert late_checksum == expected
    else:
        assert isinstance(error, TimeoutError) and "within 0.3 s" in str(error)
        assert late_sum == 0


def test_the_backend_says_what_moves_the_data_and_whether_it_is_a_fallback(run, transport):
    def main():
        registrar = this_host().spawn_procs().spawn("registrar", Registrar)
        return registrar.first_registration.call_one().get()

    name, one_sided, fallback, buffer_backend, description, warned = run(main)
    assert name == buffer_backend == transport.name
    assert fallback is (not one_sided)
    assert description.startswith(f"{name}: ")
    assert ("fallback" in description) is fallback
    assert warned == ([description] if fallback else [])
    assert one_sided is (transport.name in ("sim", "ucx", "verbs"))
