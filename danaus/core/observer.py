"""The hooks through which instrumentation (OpenTelemetry) sees calls, replies and failures.

A runtime's ``observer`` is None unless instrumentation was switched on, and
then the runtime and its instances call it at four points: a call leaves
(`call_sent`, whose answer travels in the envelope to the callee), the port
waiting for its answers closes (`port_closed`), an endpoint starts and ends
(`handling`, `handled`), and an actor fails (`actor_failed`). With it off,
each of those paths pays one attribute test.

Worker processes learn that instrumentation is on from their settings: the
``observer`` setting (``DANAUS_OBSERVER``, which `danaus.otel` sets for the
processes started afterwards) names a module whose ``observer()`` gives this
process's observer, so every proc a job starts afterwards is instrumented alike.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from danaus.core import config

if TYPE_CHECKING:
    from danaus.core.instance import Instance
    from danaus.core.runtime import Runtime
    from danaus.core.wire import Call, PortRef


class Observer:
    """What instrumentation is told; every method does nothing here."""

    def attach(self, runtime: Runtime) -> None:
        """``runtime`` reports to this observer from now on."""

    def call_sent(
        self, sender: Instance, actor: str, method: str, count: int, reply: PortRef | None
    ) -> dict[str, str] | None:
        """A call to ``count`` actors left; what to carry to them in the envelope."""
        return None

    def port_closed(self, runtime: Runtime, port: int) -> None:
        """Every answer awaited at ``port`` arrived (or will not)."""

    def handling(self, instance: Instance, call: Call) -> Any:
        """An endpoint starts; the token returned goes to `handled`."""
        return None

    def handled(self, token: Any, error: BaseException | None) -> None:
        """The endpoint of ``token`` ended, with ``error`` if it raised."""

    def actor_failed(self, instance: Instance, cause: str) -> None:
        """``instance`` failed."""


def from_settings() -> Observer | None:
    """This process's observer, if its ``observer`` setting names the module that makes it."""
    name = config.setting("observer")
    if not name:
        return None
    module: Any = importlib.import_module(name)
    return module.observer()
