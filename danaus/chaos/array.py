"""A chaos run spread over a cluster: a range of seeds split over the tasks of a SLURM array job.

One machine runs a few thousand seeds a minute; a night on a cluster runs
millions. ``danaus chaos run TARGET --seeds 0:1000000 --slurm-array 200``
splits the seeds into 200 parts of consecutive seeds, submits an array job
whose task N runs part N on whichever node SLURM gives it
(`danaus.chaos.array_task`), and merges what the tasks found into one run:
the groups, replay commands and reports that a run on one machine gives.

Everything lives in the run's directory, which the nodes must share (as a
home directory is shared):

    run.json               the run: scenario, seeds, tasks, options, the jobs that ran it
    task.sh                the batch script of every task
    results/task-N.jsonl   what task N found: a start line each time it starts, then one
                           line per seed (`SeedResult`), written as the seed ends
    logs/task-N.out        task N's output

A task that fails loses nothing it finished: each seed's line is written and
flushed as the seed ends, so a task that is killed, runs out of time or loses
its node keeps every seed before. The merge reports it as unfinished, with
its seeds and what SLURM says of its end; run again (``danaus chaos rerun``),
it skips the seeds it has results for and runs the rest.
"""

from __future__ import annotations

import json
import math
import os
import shlex
import socket
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TextIO

from danaus.chaos.results import SeedResult
from danaus.job.slurm_array import SlurmArray

RUN_FILE = "run.json"


class NotAnArrayRun(ValueError):
    """The directory holds no chaos array run (or a broken one): the message says which."""


@dataclass
class SlurmOptions:
    """How the tasks are submitted (as `SlurmArray` takes them), kept for reruns."""

    partition: str | None = None
    time_limit: str | None = None
    sbatch_args: list[str] = field(default_factory=list)
    max_running: int | None = None


@dataclass
class ArraySpec:
    """What an array run is: which scenario, which seeds in how many tasks, with which options."""

    target: str
    """The scenario as the command named it (``PATH::NAME``), for replay commands."""
    location: str
    """The same, loadable from any directory (its path made absolute)."""
    scenario: str
    seeds: range
    tasks: int
    determinism: float
    slurm: SlurmOptions = field(default_factory=SlurmOptions)
    jobs: list[str] = field(default_factory=list)
    """The array jobs submitted for it, first to last (reruns add theirs)."""
    submitted: float = 0.0
    """When the first job was submitted (seconds since the epoch)."""

    def __post_init__(self) -> None:
        if not 1 <= self.tasks <= len(self.seeds):
            raise ValueError(
                f"{len(self.seeds):,} seeds cannot be split over {self.tasks:,} tasks: "
                f"give 1 to {len(self.seeds):,}"
            )

    def part(self, index: int) -> range:
        """The seeds of task ``index``: consecutive, and as many as the others' (give or take
        one)."""
        count = len(self.seeds)
        return self.seeds[index * count // self.tasks : (index + 1) * count // self.tasks]

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["seeds"] = [self.seeds.start, self.seeds.stop]
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ArraySpec:
        start, stop = data["seeds"]
        return cls(
            **{**data, "seeds": range(start, stop), "slurm": SlurmOptions(**data["slurm"])}
        )


def location_of(target: str) -> str:
    """``target`` (``PATH.py::NAME`` or ``module::NAME``) loadable from any directory."""
    where, sep, name = target.partition("::")
    if sep and where.endswith(".py"):
        return f"{Path(where).resolve()}::{name}"
    return target


@dataclass
class TaskResults:
    """What one task has written so far."""

    results: dict[int, SeedResult]
    """By seed: the first result written for it (a rerun writes none twice)."""
    nodes: list[str]
    """Where it started, each time it did."""
    began: float
    """When it first started (seconds since the epoch; infinity: never)."""
    written: float
    """When its file was last written (0: never)."""


@dataclass
class Merged:
    """Every task's results as one run."""

    results: list[SeedResult]
    """Seed by seed, in order."""
    unfinished: dict[int, int]
    """Tasks that have not run all their seeds, and how many they ran."""
    nodes: list[str]
    elapsed: float
    """From the first submission (or, for tasks run by hand, the first start) to the last
    result written."""


class ArrayRun:
    """An array run's directory: its spec, script, results and logs."""

    def __init__(self, directory: Path, spec: ArraySpec) -> None:
        self.directory = directory
        self.spec = spec

    @classmethod
    def create(cls, directory: Path, spec: ArraySpec) -> ArrayRun:
        """A new run in ``directory``; `NotAnArrayRun` if one is there already."""
        if (directory / RUN_FILE).exists():
            raise NotAnArrayRun(
                f"{directory} holds a run already: merge it (danaus chaos merge {directory}), "
                "run what it left (danaus chaos rerun), or choose another --slurm-dir"
            )
        (directory / "results").mkdir(parents=True, exist_ok=True)
        (directory / "logs").mkdir(exist_ok=True)
        run = cls(directory.absolute(), spec)
        command = [sys.executable, "-m", "danaus.chaos.array_task", str(run.directory)]
        run.script.write_text(f"#!/bin/sh\nexec {shlex.join(command)}\n")
        run.save()
        return run

    @classmethod
    def open(cls, directory: Path) -> ArrayRun:
        """The run in ``directory``; `NotAnArrayRun` saying why if there is none."""
        try:
            data = json.loads((directory / RUN_FILE).read_text())
            return cls(directory.absolute(), ArraySpec.from_json(data))
        except FileNotFoundError:
            raise NotAnArrayRun(f"{directory} holds no chaos array run (no {RUN_FILE})") from None
        except (ValueError, KeyError, TypeError) as exc:
            raise NotAnArrayRun(f"{directory / RUN_FILE} is not a run's record: {exc}") from None

    def save(self) -> None:
        path = self.directory / RUN_FILE
        partial = path.with_suffix(".json.new")
        partial.write_text(json.dumps(self.spec.to_json(), indent=1) + "\n")
        partial.replace(path)  # whole or not at all: a reader never sees half of it

    @property
    def script(self) -> Path:
        return self.directory / "task.sh"

    def results_path(self, index: int) -> Path:
        return self.directory / "results" / f"task-{index}.jsonl"

    def log_path(self, index: int) -> Path:
        return self.directory / "logs" / f"task-{index}.out"

    def submit(self, indices: list[int] | None = None) -> str:
        """Submit tasks ``indices`` (default: all) as an array job; its id, recorded."""
        options = self.spec.slurm
        array = SlurmArray(
            script=self.script,
            tasks=self.spec.tasks,
            output=str(self.directory / "logs" / "task-%a.out"),
            job_name=f"chaos-{self.spec.scenario}",
            partition=options.partition,
            time_limit=options.time_limit,
            sbatch_args=options.sbatch_args,
            max_running=options.max_running,
        )
        job = array.submit(indices)
        if not self.spec.jobs:
            self.spec.submitted = time.time()
        self.spec.jobs.append(job)
        self.save()
        return job

    def read(self, index: int) -> TaskResults:
        """What task ``index`` has written (a line cut short by the task's end is skipped)."""
        path = self.results_path(index)
        part = self.spec.part(index)
        found = TaskResults({}, [], math.inf, 0.0)
        try:
            text = path.read_text()
            found.written = path.stat().st_mtime
        except FileNotFoundError:
            return found
        for line in text.splitlines():
            try:
                data = json.loads(line)
                if "start" in data:
                    found.nodes.append(str(data["start"]["node"]))
                    found.began = min(found.began, float(data["start"]["time"]))
                    continue
                result = SeedResult.from_json(data)
            except (ValueError, KeyError, TypeError):
                continue
            if result.seed in part:
                found.results.setdefault(result.seed, result)
        return found

    @contextmanager
    def writer(self, index: int) -> Iterator[ResultWriter]:
        """Task ``index``'s results file, open to add results to (from the task itself)."""
        path = self.results_path(index)
        with open(path, "a+", encoding="utf-8") as out:
            out.seek(0, os.SEEK_END)
            if out.tell():
                out.seek(out.tell() - 1)
                if out.read(1) != "\n":  # the last run ended inside a line: close it
                    out.write("\n")
            yield ResultWriter(out)

    def merge(self) -> Merged:
        """Every task's results so far, as one run."""
        results: list[SeedResult] = []
        unfinished: dict[int, int] = {}
        nodes: set[str] = set()
        began, last = self.spec.submitted or math.inf, 0.0
        for index in range(self.spec.tasks):
            found = self.read(index)
            results += found.results.values()
            nodes.update(found.nodes)
            last = max(last, found.written)
            if not self.spec.submitted:
                began = min(began, found.began)
            if len(found.results) < len(self.spec.part(index)):
                unfinished[index] = len(found.results)
        results.sort(key=lambda result: result.seed)
        elapsed = max(0.0, last - began) if began < math.inf else 0.0
        return Merged(results, unfinished, sorted(nodes), elapsed)


class ResultWriter:
    """Adds lines to a task's results file, each flushed at once: a task that dies keeps them."""

    def __init__(self, out: TextIO) -> None:
        self._out = out

    def started(self) -> None:
        """Note where this task runs, as it starts."""
        node = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
        array, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
        job = f"{array}_{task}" if array and task else ""
        self._line(json.dumps({"start": {"node": node, "job": job, "time": time.time()}}))

    def add(self, result: SeedResult) -> None:
        self._line(result.to_json())

    def _line(self, text: str) -> None:
        self._out.write(text + "\n")
        self._out.flush()
