"""Recording a real run's trace: the typed events of a simulated run, from every proc of a job.

A real world records events when it is made with ``trace=True`` (each proc
keeps its own, on its own clock: ``time.monotonic``, shared by the processes of
one host). The controller gathers them: from each proc mesh as it stops
(`danaus.core.agents.keep_traces`), and from the procs still alive at the end
(`gather_events`). With ``trace="run.json"``, or ``DANAUS_TRACE=run.json`` in
the environment (what ``danaus run --trace run.json script.py`` sets; either way
several files separated by ``:``), the controller writes the whole trace there when it
shuts down, in the form the file's name gives (`write`).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from danaus.core.agent_refs import agent_of
from danaus.core.trace import Event, Trace

if TYPE_CHECKING:
    from danaus.core.transport import World

log = logging.getLogger("danaus.tracing")


def destinations(trace: bool | str) -> list[str]:
    """Where a controller writes its trace: the files its ``trace`` setting names, separated by
    ``os.pathsep`` (none when it is True or False)."""
    if isinstance(trace, str):
        return [path for path in trace.split(os.pathsep) if path]
    return []


async def gather_events(world: World, timeout: float) -> list[Event]:
    """Every live proc's trace (host agents' too) and what the controller kept, in time order.

    Procs living in this OS process share its trace; a proc that does not
    answer within ``timeout`` seconds is left out.
    """
    events = list(world.trace.events)
    local = {runtime.proc_id for runtime in world.local_runtimes()}
    live = [*world.live_hosts(), *world.live_workers()]
    remote = [proc for proc in dict.fromkeys(live) if proc not in local]
    if not remote:
        return events
    world.root.client.enter()
    for proc in remote:
        try:
            events += await asyncio.wait_for(agent_of(proc).trace_events.call_one(), timeout)
        except Exception as exc:
            log.info("the trace of proc %s is missing: %r", proc, exc)
    return sorted(events, key=lambda e: e.t)


def write(events: Sequence[Event], path: str | Path, title: str = "Danaus run") -> None:
    """Write ``events`` in the form ``path``'s name gives: ``.jsonl`` JSON lines, ``.html`` a
    sequence diagram titled ``title`` (`danaus.chaos.export.to_html`), anything else a
    Perfetto (Chrome JSON) trace. Every command that takes ``--trace FILE`` writes with this."""
    ordered = sorted(events, key=lambda e: e.t)
    name = str(path)
    if name.endswith(".jsonl"):
        trace = Trace(lambda: 0.0)
        trace.events = ordered
        trace.write(path)
    elif name.endswith(".html"):
        from danaus.chaos.export import write_html

        write_html(ordered, path, title)
    else:
        from danaus.chaos.export import write_perfetto

        write_perfetto(ordered, path)
