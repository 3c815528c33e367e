"""How the conformance suite runs a controller program on each transport."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import danaus.sim


@dataclass(frozen=True)
class Transport:
    name: str
    run: Callable[..., Any]
    real: bool


def _run_sim(main: Callable[[], Any], hosts: int = 2, seed: int = 0) -> Any:
    return danaus.sim.run(main, hosts=hosts, seed=seed).value


def available() -> list[Transport]:
    """The transports this machine can run, simulator first."""
    return [Transport("sim", _run_sim, real=False)]
