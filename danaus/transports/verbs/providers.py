"""Choosing the device: RDMA hardware through pyverbs, or the emulated device for tests."""

from __future__ import annotations

from danaus.transports.verbs.device import Device
from danaus.transports.verbs.registrations import GpuRegistrar
from danaus.transports.verbs.settings import Settings


def check(settings: Settings) -> None:
    """Raise, with one sentence, if ``settings`` name no device this host can open."""
    if settings.provider == "pyverbs":
        from danaus.transports.verbs import hardware

        hardware.check(settings)


def open_device(settings: Settings) -> Device:
    if settings.provider == "emulated":
        from danaus.transports.verbs.emulated import EmulatedDevice

        return EmulatedDevice(settings.device or "emulated0")
    from danaus.transports.verbs import hardware

    return hardware.open_device(settings)


def gpu_registrar(settings: Settings) -> GpuRegistrar | None:
    """How GPU memory is registered with the device (only real devices reach it)."""
    if settings.provider == "emulated":
        return None
    from danaus.transports.verbs.gpu import register_cuda

    return register_cuda
