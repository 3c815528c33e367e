"""A read over tcp that its caller gave up on: no byte lands after the caller hears so."""

from __future__ import annotations

import threading
from typing import Any

import msgspec
import pytest

from danaus.core.transport import MemoryHandle
from danaus.transports.tcp.memory import Data, MemoryService

pytestmark = pytest.mark.timeout(60)

OWNER = "owner"


def _reading(wanted: Any, landing: threading.Lock) -> tuple[MemoryService, bytearray, int]:
    """A service with a 4-byte read from ``OWNER`` under way; its destination; the op's id."""
    sent: list[tuple[str, list[Any]]] = []
    service = MemoryService("reader", lambda dest, message: sent.append((dest, message)), "tcp", 4)
    destination = bytearray(4)
    handle = MemoryHandle(OWNER, 1, 4, "tcp")
    service.start(handle, 0, memoryview(destination), False, lambda _: None, wanted, landing)
    [(dest, [_, request])] = sent
    assert dest == OWNER
    return service, destination, msgspec.msgpack.decode(request)[1]


def _answer(op: int) -> list[Any]:
    return [msgspec.msgpack.encode(Data(op, 0)), b"data"]


def test_bytes_that_arrive_after_the_caller_gave_up_do_not_land() -> None:
    service, destination, op = _reading(lambda: False, threading.Lock())
    service.handle(OWNER, _answer(op))
    assert destination == bytearray(4)


def test_a_caller_giving_up_while_bytes_land_hears_so_only_once_they_are_in_place() -> None:
    checking, go_on = threading.Event(), threading.Event()

    def wanted() -> bool:
        checking.set()
        assert go_on.wait(30)
        return True

    landing = threading.Lock()
    service, destination, op = _reading(wanted, landing)
    io_thread = threading.Thread(target=service.handle, args=(OWNER, _answer(op)))
    io_thread.start()
    assert checking.wait(30)
    seen: list[bytes] = []

    def give_up() -> None:
        with landing:  # what the transport does when its caller's wait is cancelled
            seen.append(bytes(destination))

    caller = threading.Thread(target=give_up)
    caller.start()
    go_on.set()
    io_thread.join(30)
    caller.join(30)
    assert seen == [b"data"]
