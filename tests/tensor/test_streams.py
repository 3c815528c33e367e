"""Streams: a second ordered queue of work on each proc, beside the default one (item 6)."""

from __future__ import annotations

import pytest
import torch

import danaus
from danaus import this_host
from danaus.core.config import current_world
from danaus.tensor import TensorUsageError


def test_a_borrowed_tensor_is_reduced_on_another_stream(run):
    def main():
        mesh = this_host().spawn_procs({"dp": 2})
        comms = danaus.Stream("comms")
        with mesh.activate():
            grad = torch.ones(4) * (mesh.rank_tensor("dp") + 1)
            lent, borrow = comms.borrow(grad, mutable=True)
            with comms.activate():
                lent.reduce_("dp", "sum")
            other = torch.arange(4.0) * 2  # the default stream goes on meanwhile
            borrow.drop()
            after = grad + other  # waits, on each proc, for the reduction to be done
        return [danaus.inspect(after, dp=d) for d in range(2)], danaus.get_active_stream().name

    after, active = run(main)
    assert active == "main"
    assert [a.tolist() for a in after] == [[3.0, 5.0, 7.0, 9.0]] * 2


def test_borrow_rules(sim):
    def main():
        mesh = this_host().spawn_procs({"dp": 2})
        comms = danaus.Stream("comms")
        with mesh.activate():
            t = torch.ones(3)
            with comms.activate(), pytest.raises(TensorUsageError, match="is on stream 'main'"):
                t + 1  # another stream's tensor, not borrowed
            _, borrow = comms.borrow(t, mutable=True)
            with pytest.raises(TensorUsageError, match="lent mutably"):
                t + 1  # lent for writing: its own stream may not read it
            with pytest.raises(RuntimeError, match="already lent"):
                comms.borrow(t, mutable=True)
            borrow.drop()
            read_only, borrow = comms.borrow(t)
            doubled = t * 2  # lent read-only: reading is fine...
            with pytest.raises(TensorUsageError, match="lent to another stream"):
                t.add_(1)  # ...writing is not
            with comms.activate():
                with pytest.raises(TensorUsageError, match="lent to another stream"):
                    read_only.add_(1)
                copy = read_only + 1
            borrow.drop()  # waits, on each proc, for ``copy``
            t.add_(1)  # returned: writable again
            with pytest.raises(TensorUsageError, match="dropped"):
                read_only + 1
            with comms.activate():
                copied = danaus.inspect(copy).tolist()
        return danaus.inspect(t).tolist(), danaus.inspect(doubled).tolist(), copied

    assert sim(main) == ([2.0] * 3, [2.0] * 3, [2.0] * 3)


def test_two_streams_run_side_by_side(sim):
    """While a slow collective holds one stream of each proc, the other stream's work and
    fetches go on (virtual time: the collective's messages are held up 5 s)."""

    def main():
        mesh = danaus.hosts().spawn_procs({"dp": 1})  # a proc on each simulated host
        world = current_world()
        comms = danaus.Stream("comms")
        with mesh.activate():
            x = torch.ones(1024)
            lent, borrow = comms.borrow(x, mutable=True)
            danaus.inspect(lent)
            heal = world.faults.delay(*world.hosts(), 5.0)
            start = world.loop.time()
            with comms.activate():
                reduced = lent.reduce("hosts", "sum")
            computed = torch.arange(8.0).sum()
            danaus.inspect(computed)
            computed_at = world.loop.time() - start
            with comms.activate():
                danaus.inspect(reduced)
            reduced_at = world.loop.time() - start
            heal()
            borrow.drop()
        return computed_at, reduced_at

    computed_at, reduced_at = sim(main)
    assert computed_at < 1.0 <= 5.0 <= reduced_at
