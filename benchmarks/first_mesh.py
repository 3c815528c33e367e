"""Where a program's first mesh spends its time, in CPU seconds, which load on the machine
does not stretch as it does wall time.

Each run is a program of its own in a fresh interpreter (Danaus's bytecode
compiled first, as an installed package has it): it imports Danaus, configures
``tcp``, spawns ``--procs`` procs and an actor on each, and calls it once. It
reports:

- ``server_lead_cpu_s``: the controller's CPU time from the start of its fork
  server to ``this_host()``, where the first mesh's clock starts: how much of
  the controller's own work the server's imports ran beside (0 or less: the
  server started only as the world was made, after the controller's imports);
- ``server_lead_s``: the same in wall time;
- ``proc_cpu_ms``: the median CPU time of a proc, from its fork to the end of
  its first call;
- ``controller_cpu_ms``: the controller's CPU time from ``this_host()`` until
  every answer is back;
- ``first_mesh_s``: the wall time of the same (as ``messaging.py``'s
  ``first_mesh_4``).

Medians of ``--runs`` runs, with the lowest and highest in ``*_range``::

    python benchmarks/first_mesh.py [--procs 4] [--runs 5]
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import statistics
import subprocess
import sys
import tempfile

import danaus
from danaus.transports.tcp.forkserver import SERVER_MODULE

PROGRAM = """
import json
import statistics
import sys
import time

started = []


def audit(event, args):
    if event == "subprocess.Popen" and {server!r} in map(str, args[1] or ()):
        started.append((time.process_time(), time.perf_counter()))


sys.addaudithook(audit)

import danaus

danaus.configure(transport="tcp")


class Clock(danaus.Actor):
    @danaus.endpoint
    def cpu(self):
        return time.process_time()


if __name__ == "__main__":
    cpu, wall = time.process_time(), time.perf_counter()
    procs = danaus.this_host().spawn_procs(per_host={{"gpus": {procs}}})
    answers = procs.spawn("clock", Clock).cpu.call().get(timeout=60)
    print(json.dumps({{
        "server_lead_cpu_s": cpu - started[0][0],
        "server_lead_s": wall - started[0][1],
        "proc_cpu_ms": 1000 * statistics.median(answers.values()),
        "controller_cpu_ms": 1000 * (time.process_time() - cpu),
        "first_mesh_s": time.perf_counter() - wall,
    }}), flush=True)
"""
"""A whole program; a forked proc's CPU clock starts at its fork."""


def run(procs: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "first_mesh.py")
        with open(path, "w") as file:
            file.write(PROGRAM.format(server=SERVER_MODULE, procs=procs))
        done = subprocess.run(
            [sys.executable, path], capture_output=True, text=True, timeout=120, check=False
        )
    if done.returncode != 0:
        raise RuntimeError(f"the program failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--procs", type=int, default=4)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)
    compileall.compile_dir(os.path.dirname(danaus.__file__), quiet=1)
    results = [run(args.procs) for _ in range(args.runs)]
    metrics: dict[str, object] = {}
    for name in results[0]:
        values = [result[name] for result in results]
        metrics[name] = round(statistics.median(values), 4)
        metrics[f"{name}_range"] = [round(min(values), 4), round(max(values), 4)]
    head = {"benchmark": "first_mesh", "procs": args.procs, "runs": args.runs}
    print(json.dumps({**head, **metrics}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
