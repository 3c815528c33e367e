"""Which device the verbs transport uses and how, from the environment of each process.

Which NIC, port and GID to use are facts about each host, so they come from
the environment (as ``UCX_NET_DEVICES`` and ``NCCL_IB_HCA`` do), which the
workers a controller starts inherit; a job across hosts sets them per host.

=========================== =========================================================
``DANAUS_VERBS_PROVIDER``   ``pyverbs`` (default: the RDMA hardware), or ``emulated``
                            (a device emulated between processes, for tests only)
``DANAUS_VERBS_DEVICE``     the device to open (``mlx5_0``); default: the first
                            device with an active port
``DANAUS_VERBS_PORT``       its port; default: its first active port
``DANAUS_VERBS_GID_INDEX``  the GID to route with; default: on RoCE, a RoCE v2 GID of
                            an IPv4 address if there is one, else GID 0; on InfiniBand, 0
``DANAUS_VERBS_TIMEOUT``    the ACK timeout exponent (4.096 µs * 2^n), 1 to 31; default 18
``DANAUS_VERBS_RETRY_COUNT`` how often an unanswered request is sent again, 0 to 7;
                            default 7
``DANAUS_VERBS_CACHE_BYTES`` how many bytes of idle registrations to keep; default 256 MiB
=========================== =========================================================
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from danaus.transports.verbs.device import Timeouts
from danaus.transports.verbs.registrations import DEFAULT_CACHE_BYTES

PROVIDERS = ("pyverbs", "emulated")


@dataclass(frozen=True)
class Settings:
    provider: str = "pyverbs"
    device: str | None = None
    port: int | None = None
    gid_index: int | None = None
    timeouts: Timeouts = field(default_factory=Timeouts)
    cache_bytes: int = DEFAULT_CACHE_BYTES

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] = os.environ) -> Settings:
        """The settings the environment gives; ``ValueError`` naming a variable that is wrong."""
        provider = environ.get("DANAUS_VERBS_PROVIDER") or "pyverbs"
        if provider not in PROVIDERS:
            raise ValueError(
                f"DANAUS_VERBS_PROVIDER={provider!r}: choose one of {', '.join(PROVIDERS)}"
            )
        default = Timeouts()
        timeouts = Timeouts(
            timeout=_number(environ, "DANAUS_VERBS_TIMEOUT", 1, 31, default.timeout),
            retry_count=_number(environ, "DANAUS_VERBS_RETRY_COUNT", 0, 7, default.retry_count),
        )
        return cls(
            provider=provider,
            device=environ.get("DANAUS_VERBS_DEVICE") or None,
            port=_number(environ, "DANAUS_VERBS_PORT", 1, 255, None),
            gid_index=_number(environ, "DANAUS_VERBS_GID_INDEX", 0, 1 << 16, None),
            timeouts=timeouts,
            cache_bytes=_number(
                environ, "DANAUS_VERBS_CACHE_BYTES", 0, 1 << 62, DEFAULT_CACHE_BYTES
            ),
        )


def _number(
    environ: Mapping[str, str], name: str, lowest: int, highest: int, default: int | None
) -> int | None:
    text = environ.get(name)
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{name}={text!r} is not a whole number") from None
    if not lowest <= value <= highest:
        raise ValueError(f"{name}={value} is out of range ({lowest} to {highest})")
    return value
