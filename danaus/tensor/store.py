"""The key-value store the procs of a mesh meet at to build torch.distributed process groups.

torch.distributed's backends exchange their addresses through a store when a
process group is made. Rather than opening a TCPStore (a listening socket of
its own, on every interface), the tensor engine keeps the store in the tensor
worker at rank 0 of the mesh (`StoreHost`) and reaches it with Danaus
messages, over the job's authenticated connections (`MessageStore`, a
``torch.distributed.Store`` that any process group takes).
"""

from __future__ import annotations

import datetime
import time
from typing import TYPE_CHECKING, Any

import torch.distributed as dist

from danaus.core.ports import Port

if TYPE_CHECKING:
    from danaus.core.mesh import ActorMesh
    from danaus.core.runtime import Runtime

STORE_TIMEOUT = datetime.timedelta(seconds=300)
"""How long a proc waits for the others to reach a process group's creation."""
LOSS_CHECK = 1.0
"""How often (seconds) a wait at the store checks whether a proc of the group was lost."""


class StoreHost:
    """The store's keys and values, and the requests waiting for keys not yet set."""

    def __init__(self) -> None:
        self._values: dict[str, bytes] = {}
        self._waiting: dict[str, list[tuple[Port[Any], str]]] = {}

    def handle(self, port: Port[Any], op: str, key: str, value: Any) -> None:
        values = self._values
        if op == "set":
            values[key] = value
            self._wake(key)
            port.send(None)
        elif op == "add":
            total = int(values.get(key, b"0")) + value
            values[key] = str(total).encode()
            self._wake(key)
            port.send(total)
        elif op == "compare_set":
            expected, desired = value
            current = values.get(key)
            if (current is None and expected == b"") or current == expected:
                values[key] = current = desired
                self._wake(key)
            port.send(current)
        elif op in ("get", "wait"):
            if key in values:
                port.send(values[key] if op == "get" else None)
            else:
                self._waiting.setdefault(key, []).append((port, op))
        elif op == "check":
            port.send(all(k in values for k in key.split("\0")))
        elif op == "delete":
            port.send(values.pop(key, None) is not None)
        elif op == "count":
            port.send(len(values))
        else:
            port.exception(ValueError(f"unknown store operation {op!r}"))

    def _wake(self, key: str) -> None:
        for port, op in self._waiting.pop(key, []):
            port.send(self._values[key] if op == "get" else None)


class MessageStore(dist.Store):
    """A ``torch.distributed.Store`` whose keys live in a `StoreHost`, reached by messages.

    A wait for a key fails as soon as one of ``members`` (the procs of the group
    being made) is lost, rather than when the timeout ends.
    """

    def __init__(
        self,
        host: ActorMesh[Any],
        runtime: Runtime,
        members: list[str],
        timeout: datetime.timedelta = STORE_TIMEOUT,
    ) -> None:
        super().__init__()
        self._host = host
        self._runtime = runtime
        self._members = members
        self._timeout = timeout
        for proc in members:
            runtime.on_loop(runtime.watch, proc)

    def _ask(self, op: str, key: str, value: Any = None) -> Any:
        answer = self._host.store.call_one(op, key, value)
        deadline = time.monotonic() + self._timeout.total_seconds()
        while True:
            try:
                return answer.get(LOSS_CHECK)
            except TimeoutError:
                lost = [p for p in self._members if self._runtime.is_lost(p)]
                if lost:
                    raise RuntimeError(
                        f"proc {lost[0]} of the group was lost while the group was being made"
                    ) from None
                if time.monotonic() > deadline:
                    raise

    def set(self, key: str, value: Any) -> None:
        self._ask("set", key, value.encode() if isinstance(value, str) else bytes(value))

    def get(self, key: str) -> bytes:
        return self._ask("get", key)

    def add(self, key: str, value: int) -> int:
        return self._ask("add", key, value)

    def compare_set(self, key: str, expected: Any, desired: Any) -> bytes:
        pair = tuple(v.encode() if isinstance(v, str) else bytes(v) for v in (expected, desired))
        return self._ask("compare_set", key, pair)

    def wait(self, keys: list[str], timeout: Any = None) -> None:
        for key in keys:
            self._ask("wait", key)

    def check(self, keys: list[str]) -> bool:
        return self._ask("check", "\0".join(keys))

    def delete_key(self, key: str) -> bool:
        return self._ask("delete", key)

    def num_keys(self) -> int:
        return self._ask("count", "")

    def set_timeout(self, timeout: datetime.timedelta) -> None:
        self._timeout = timeout
