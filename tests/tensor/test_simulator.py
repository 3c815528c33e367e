"""The tensor engine on the simulator: real CPU tensors, the same trace and numbers for the same
seed, and chaos that reaches tensor work (item 8). Also the tutorial's example, which this runs."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import torch

import danaus
import danaus.sim
from danaus import this_host
from danaus.chaos import run_scenario

ROOT = Path(__file__).resolve().parents[2]
PAGE = (ROOT / "docs" / "tensor-tutorial.md").read_text()
EXAMPLE = ROOT / "examples" / "tensor_training.py"


def example():
    """The tutorial's example, imported from its file (once)."""
    module = sys.modules.get("tensor_training")
    if module is None:
        spec = importlib.util.spec_from_file_location("tensor_training", EXAMPLE)
        module = sys.modules["tensor_training"] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return module


def test_ranks_draw_from_the_run_seed():
    def main():
        mesh = this_host().spawn_procs({"gpu": 2})
        with mesh.activate():
            t = torch.rand(3)
        return [danaus.inspect(t, gpu=g) for g in range(2)]

    first, again, other = (danaus.sim.run(main, seed=s).value for s in (1, 1, 2))
    assert torch.equal(first[0], again[0]) and torch.equal(first[1], again[1])
    assert not torch.equal(first[0], first[1])
    assert not torch.equal(first[0], other[0])


def test_the_tutorial_survives_a_crash_and_replays_by_seed():
    training = example()
    first = training.simulate(3, 9)
    again = training.simulate(3, 9)
    losses, restarts, failures = first.value
    assert restarts == 1 and len(failures) == 1 and dict(failures[0].rank) == {"hosts": 1, "gpu": 0}
    assert again.digest == first.digest and again.value[0] == losses
    expected = training.one_process()
    assert max(abs(a - b) for a, b in zip(losses, expected)) < 1e-5


def test_chaos_reaches_tensor_work():
    """A seed whose faults crash two training procs and delay the collectives' links: training
    ends with the right losses, and the seed replays to the same trace."""
    scenario = example().DataParallelTraining()
    outcome = run_scenario(scenario, 4)
    assert not outcome.failed, outcome.violations
    assert {"crash", "delay"} <= {fault.kind for fault in outcome.plan.faults}
    assert next(outcome.history.of("trained"))["restarts"] == 2
    assert run_scenario(scenario, 4).digest == outcome.digest


def test_the_page_shows_the_examples_code():
    included = re.findall(r'^--8<-- "examples/tensor_training\.py:(\w+)"$', PAGE, re.MULTILINE)
    source = EXAMPLE.read_text()
    assert included == ["model", "step", "loop", "main", "scenario"]
    for name in included:
        assert f"# --8<-- [start:{name}]" in source and f"# --8<-- [end:{name}]" in source
