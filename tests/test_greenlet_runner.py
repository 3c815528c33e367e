"""The simulator's runner of sync actor code: greenlets on the loop's own thread."""

from __future__ import annotations

import gc
import weakref

import pytest

from danaus.core.blocking import GreenletRunner
from danaus.transports.sim.loop import VirtualTimeLoop
from danaus.transports.sim.timeline import Timeline


class Value:
    """Something a sync endpoint returns or raises, whose lifetime the test follows."""


def test_an_idle_greenlet_keeps_neither_the_result_nor_the_error_of_its_last_call():
    loop = VirtualTimeLoop(Timeline())
    runner = GreenletRunner(loop)
    kept: list[weakref.ref[object]] = []

    def returns() -> Value:
        value = Value()
        kept.append(weakref.ref(value))
        return value

    def raises() -> None:
        value = Value()
        kept.append(weakref.ref(value))
        raise ValueError(value)

    async def main() -> None:
        assert isinstance(await runner.call_sync(returns), Value)
        with pytest.raises(ValueError):
            await runner.call_sync(raises)

    loop.run_until_complete(main())
    loop.close()
    gc.collect()
    assert [ref() for ref in kept] == [None, None]
