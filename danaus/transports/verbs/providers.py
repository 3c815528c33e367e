"""Choosing the device: RDMA hardware through pyverbs, or the emulated device for tests.

Which NIC, port and GID to use are facts about each host, so each process
takes them from its own settings (``verbs_provider``, ``verbs_device``,
``verbs_port``, ``verbs_gid_index``: its environment, as ``UCX_NET_DEVICES``
and ``NCCL_IB_HCA`` are), which the workers a controller starts inherit; a job
across hosts sets them per host.
"""

from __future__ import annotations

from danaus.core.settings import Settings
from danaus.transports.verbs.device import Device
from danaus.transports.verbs.registrations import GpuRegistrar


def check(settings: Settings) -> None:
    """Raise, with one sentence, if ``settings`` name no device this host can open."""
    if settings.verbs_provider == "pyverbs":
        from danaus.transports.verbs import hardware

        hardware.check(settings)


def open_device(settings: Settings) -> Device:
    if settings.verbs_provider == "emulated":
        from danaus.transports.verbs.emulated import EmulatedDevice

        return EmulatedDevice(settings.verbs_device or "emulated0")
    from danaus.transports.verbs import hardware

    return hardware.open_device(settings)


def gpu_registrar(settings: Settings) -> GpuRegistrar | None:
    """How GPU memory is registered with the device (only real devices reach it)."""
    if settings.verbs_provider == "emulated":
        return None
    from danaus.transports.verbs.gpu import register_cuda

    return register_cuda
