"""Chaos testing: deterministic fault injection, many seeds, checkers, shrinking, replay.

Write a `Scenario` (a workload and its invariants), then run it over many
seeds with `run_seeds` or ``danaus chaos run PATH::Scenario --seeds 0:1000``.
Each seed draws a fault plan; a failing seed prints its plan and a one-line
replay command, and `shrink` reduces its plan to the fewest faults that still
fail.
"""

from danaus.chaos.checkers import Violation
from danaus.chaos.faults import crash, pause, resume
from danaus.chaos.history import History
from danaus.chaos.plan import EXTRA_KINDS, KINDS, TIMING_KINDS, Fault, Plan, random_plan
from danaus.chaos.runner import ChaosFailure, Outcome, check_seed, run_scenario, run_seeds, shrink
from danaus.chaos.scenario import Scenario
from danaus.core.faults import FaultUnsupported, Heal, HostControl
from danaus.core.sites import InjectedFatal, InjectedFault

__all__ = [
    "EXTRA_KINDS",
    "KINDS",
    "TIMING_KINDS",
    "ChaosFailure",
    "Fault",
    "FaultUnsupported",
    "Heal",
    "History",
    "HostControl",
    "InjectedFatal",
    "InjectedFault",
    "Outcome",
    "Plan",
    "Scenario",
    "Violation",
    "check_seed",
    "crash",
    "pause",
    "random_plan",
    "resume",
    "run_scenario",
    "run_seeds",
    "shrink",
]
