"""The registration cache, on the emulated device."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import numpy as np
import pytest

from danaus.transports.verbs.device import REMOTE, Access, WcStatus, WrOpcode
from danaus.transports.verbs.emulated import EmulatedDevice
from danaus.transports.verbs.registrations import Registrations
from tests.verbs.devices import connect, side, wait_for


@pytest.fixture
def device() -> Iterator[EmulatedDevice]:
    device = EmulatedDevice("cache")
    try:
        yield device
    finally:
        device.close()


def test_the_same_memory_and_memory_inside_it_register_once(device):
    registrations = Registrations(device)
    array = np.zeros(1 << 16, dtype=np.uint8)
    first = registrations.pin(memoryview(array), Access.LOCAL_WRITE)
    registrations.release(first)
    again = registrations.pin(memoryview(array), Access.LOCAL_WRITE)
    inside = registrations.pin(memoryview(array)[100:200], Access.NONE)
    assert registrations.registered == 1
    assert inside.lkey == again.lkey and inside.iova() == again.iova(100)
    wider = registrations.pin(memoryview(array), Access.LOCAL_WRITE | Access.REMOTE_READ)
    assert registrations.registered == 2 and wider.rkey != again.rkey


def test_idle_registrations_keep_their_memory_alive_until_evicted(device):
    registrations = Registrations(device, cache_bytes=1 << 16)
    first = np.zeros(1 << 16, dtype=np.uint8)
    alive = weakref.ref(first)
    registrations.release(registrations.pin(memoryview(first), Access.LOCAL_WRITE))
    del first
    gc.collect()
    assert alive() is not None
    second = np.zeros(1 << 16, dtype=np.uint8)
    registrations.release(registrations.pin(memoryview(second), Access.LOCAL_WRITE))
    gc.collect()
    assert alive() is None
    registrations.release(registrations.pin(memoryview(second), Access.LOCAL_WRITE))
    assert registrations.registered == 2


def test_private_registrations_are_neither_reused_nor_kept(device):
    registrations = Registrations(device)
    buffer = memoryview(bytearray(4096))
    private = registrations.pin(buffer, Access.LOCAL_WRITE, private=True)
    shared = registrations.pin(buffer, Access.LOCAL_WRITE)
    assert private.lkey != shared.lkey
    registrations.release(private)
    registrations.release(shared)
    registrations.release(registrations.pin(buffer, Access.LOCAL_WRITE))
    assert registrations.registered == 2


def test_a_buffers_own_registration_stops_opening_its_memory_when_released():
    a_device, b_device = EmulatedDevice("a"), EmulatedDevice("b")
    try:
        a, b = side(a_device), side(b_device)
        connect(a, b)
        registrations = Registrations(b_device)
        owned = np.arange(64, dtype=np.uint8)
        first = registrations.pin(memoryview(owned), REMOTE, own=True)
        second = registrations.pin(memoryview(owned), REMOTE, own=True)
        local = registrations.pin(memoryview(owned), Access.LOCAL_WRITE)
        assert first.rkey != second.rkey and local.rkey in (first.rkey, second.rkey)
        registrations.release(local)
        registrations.release(first)

        def read(rkey: int) -> WcStatus:
            a.qp.post_send(1, WrOpcode.RDMA_READ, a.address, 64, a.region.lkey, first.iova(), rkey)
            return wait_for(a.cq)[0].status

        assert read(second.rkey) is WcStatus.SUCCESS
        assert bytes(a.memory[:64]) == owned.tobytes()
        assert read(first.rkey) is WcStatus.REM_ACCESS_ERR
    finally:
        a_device.close()
        b_device.close()
