"""Failures: a failed operation poisons what depends on it and leaves the procs usable; a proc
that dies is a supervision event (item 7)."""

from __future__ import annotations

import asyncio

import pytest
import torch

import danaus
from danaus import (
    Actor,
    Channel,
    MeshFailure,
    PortReceiver,
    SupervisionError,
    context,
    endpoint,
    this_host,
)
from danaus.chaos import crash
from danaus.core.config import current_world
from danaus.core.supervision import default_unhandled_fault_hook
from danaus.tensor import RemoteTensorError


@danaus.remote(propagate=lambda x: x)
def refused_by_rank_one(x: torch.Tensor) -> torch.Tensor:
    if context().actor_instance.rank.rank == 1:
        raise ValueError("rank one refuses")
    return x + 1


def record_root_failures() -> PortReceiver[MeshFailure]:
    """Replace the controller's fault hook with one that sends each failure to a port."""
    port, receiver = Channel.open()
    danaus.unhandled_fault_hook = port.send
    return receiver


def test_a_failed_operation_poisons_its_dependents_only(run):
    def main():
        mesh = this_host().spawn_procs({"gpu": 2})
        with mesh.activate():
            x = torch.arange(6.0).reshape(3, 2)
            bad = x.index_select(0, torch.tensor([5]))  # out of range: it fails on the procs
            worse = bad.sum() * 2
            good = x.sum()
            picky = refused_by_rank_one(x)
        errors = {}
        for name, tensor in (("bad", bad), ("worse", worse)):
            with pytest.raises(RemoteTensorError) as caught:
                danaus.inspect(tensor, gpu=1)
            errors[name] = caught.value
        with pytest.raises(RemoteTensorError) as caught:
            danaus.inspect(picky, gpu=1)
        errors["picky"] = caught.value
        with mesh.activate():
            later = x * 10  # the procs are still usable
        return errors, danaus.inspect(good), danaus.inspect(picky, gpu=0), danaus.inspect(later)

    errors, good, picky, later = run(main)
    bad, worse, refused = errors["bad"], errors["worse"], errors["picky"]
    assert (bad.depends, worse.depends) == (False, True)
    assert bad.operation == worse.operation == "aten.index_select.default"
    assert bad.rank == {"gpu": 1}
    assert "bad = x.index_select(0, torch.tensor([5]))" in bad.issued  # the controller's line
    assert worse.issued == bad.issued
    assert isinstance(bad.exception, IndexError) and "out of range" in str(bad.exception)
    assert "remote traceback" in str(bad) and "depends on the failed operation" in str(worse)
    assert refused.rank == {"gpu": 1} and isinstance(refused.exception, ValueError)
    assert 'raise ValueError("rank one refuses")' in refused.traceback
    assert good.item() == 15.0
    assert torch.equal(picky, torch.arange(6.0).reshape(3, 2) + 1)
    assert later.sum().item() == 150.0


def test_shape_errors_are_caught_in_the_controller(sim):
    def main():
        mesh = this_host().spawn_procs({"gpu": 2})
        with mesh.activate():
            with pytest.raises(RuntimeError, match=r"aten\.mm\.default"):
                torch.ones(3, 4) @ torch.ones(5, 6)
            return danaus.inspect(torch.ones(2) + 1).tolist()

    assert sim(main) == [2.0, 2.0]


def test_a_proc_that_dies_is_a_supervision_event(run):
    def main():
        failures = record_root_failures()
        mesh = this_host().spawn_procs({"gpu": 2})
        with mesh.activate():
            x = torch.ones(4)
            danaus.inspect(x, gpu=1)
        crash(mesh.slice(gpu=1))
        failure = failures.recv().get(timeout=60)
        with pytest.raises(SupervisionError):
            danaus.inspect(x, gpu=1)
        with mesh.activate(), pytest.raises(SupervisionError):
            x * 3  # the whole mesh has a failed proc: refused where it is written
        survivors = mesh.slice(gpu=slice(0, 1))
        kept = x.slice_mesh(gpu=0).to_mesh(survivors)  # a slice without it goes on
        with survivors.activate():
            alive = danaus.inspect(kept * 3)
        return failure, alive

    failure, alive = run(main)
    assert dict(failure.rank) == {"gpu": 1}
    assert alive.tolist() == [3.0] * 4


def test_a_collective_in_flight_when_a_rank_dies_fails_instead_of_hanging(sim):
    def main():
        record_root_failures()
        world = current_world()
        mesh = danaus.hosts().spawn_procs({"gpu": 1})  # a proc on each simulated host
        with mesh.activate():
            x = torch.ones(4)
            danaus.inspect(x, hosts=1)
            world.faults.delay(*world.hosts(), 5.0)  # the collective is still in flight...
            reduced = x.reduce("hosts")
            with danaus.Stream("other").activate():
                danaus.inspect(torch.ones(1))  # (virtual time passes: the reduction starts)
        crash(mesh.slice(hosts=1))  # ...when this rank dies
        with pytest.raises(RemoteTensorError) as caught:
            danaus.inspect(reduced, hosts=0)
        return caught.value

    error = sim(main)
    assert error.rank == {"hosts": 0, "gpu": 0} and error.operation == "reduce"
    assert isinstance(error.exception, SupervisionError)


class Trainer(Actor):
    """Owns a proc mesh and does tensor work on it; its ``__supervise__`` handles the loss of a
    proc by noting it, and the next step spawns new procs."""

    def __init__(self) -> None:
        self.failures: list[MeshFailure] = []
        self.procs = this_host().spawn_procs({"gpu": 2})

    def __supervise__(self, failure: MeshFailure) -> bool:
        self.failures.append(failure)
        return True

    @endpoint
    def step(self) -> float:
        if self.failures:
            self.procs = this_host().spawn_procs({"gpu": 2})  # recover: new procs
        with self.procs.activate():
            x = torch.ones(4) * (self.procs.rank_tensor("gpu") + 1)
        return danaus.inspect(x, gpu=1).sum().item()

    @endpoint
    def lose_a_proc(self) -> None:
        crash(self.procs.slice(gpu=1))

    @endpoint
    def handled(self) -> list[tuple[str, dict]]:
        return [(f.mesh_name, dict(f.rank)) for f in self.failures]


def test_an_actor_owning_the_procs_supervises_their_tensor_workers(sim):
    async def main():
        trainer = this_host().spawn_procs().spawn("trainer", Trainer)
        before = await trainer.step.call_one()
        await trainer.lose_a_proc.call_one()
        handled = []
        while not handled:
            handled = await trainer.handled.call_one()
            await asyncio.sleep(0.5)  # virtual time: the loss is detected
        after = await trainer.step.call_one()
        return before, handled, after

    before, handled, after = sim(main)
    assert before == after == 8.0
    assert handled == [("tensor_engine", {"gpu": 1})]


def test_by_default_a_lost_proc_ends_the_controller_with_a_report(sim, capsys):
    def main():
        danaus.unhandled_fault_hook = default_unhandled_fault_hook  # the suite's replaced it
        mesh = this_host().spawn_procs({"gpu": 2})
        with mesh.activate():
            x = torch.ones(4)
        danaus.inspect(x, gpu=1)
        crash(mesh.slice(gpu=1))
        survivor = mesh.slice(gpu=0)
        with survivor.activate():
            y = torch.ones(4)
        while True:  # work on the survivor, until the failure ends the controller
            with survivor.activate():
                y = y + 1
            danaus.inspect(y)

    with pytest.raises(SystemExit) as ended:
        sim(main)
    assert ended.value.code == 1
    report = capsys.readouterr().err
    assert "unhandled failure; the controller exits" in report
    assert "mesh 'tensor_engine' rank gpu=1" in report
