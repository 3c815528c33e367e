"""Jobs on several hosts: mesh-up through attach, and a call and a 64 MiB argument between hosts.

The hosts are network namespaces on this machine, each running ``danaus
worker`` (``tests/cluster.py``); making them needs root and ``ip``. Prints one
JSON line per figure and transport:

* ``mesh_up_attach``: seconds from ``attach_to_workers`` (3 hosts) to 2 procs
  per host up, an actor on each, and every actor answered; median, min and max
  over the runs, and the first run apart;
* ``hosts_call_rtt``: ``call_one`` round trips from an actor on one host to an
  actor on another;
* ``hosts_payload``: a bytes argument of ``--mib`` MiB sent from one host to
  another and acknowledged, as MB/s.

Without root or ``ip``, prints one line saying why, and exits 0.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import danaus  # noqa: E402
from danaus import Actor, context, endpoint  # noqa: E402
from tests.cluster import cluster, unavailable  # noqa: E402

HOSTS = 3
PER_HOST = 2


class Peer(Actor):
    @endpoint
    def ping(self) -> int:
        return context().actor_instance.rank.rank

    @endpoint
    def take(self, data: bytes) -> int:
        return len(data)

    @endpoint
    def round_trips(self, other: Actor, calls: int) -> list[float]:
        """``calls`` timed round trips to ``other`` (a mesh of one), in seconds."""
        times = []
        for _ in range(calls):
            start = time.perf_counter()
            other.ping.call_one().get()
            times.append(time.perf_counter() - start)
        return times

    @endpoint
    def send(self, other: Actor, mib: int, repeats: int) -> list[float]:
        """Seconds to send ``mib`` MiB to ``other`` and hear back, ``repeats`` times."""
        data = bytes(mib << 20)
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            other.take.call_one(data).get()
            times.append(time.perf_counter() - start)
        return times


def mesh_up(transport: str, options: dict[str, object], runs: int) -> dict[str, object]:
    times = []
    for _ in range(runs):
        danaus.configure(transport=transport, bind_host=options["bind_host"])
        try:
            start = time.perf_counter()
            hosts = danaus.attach_to_workers(workers=options["workers"], key=options["job_key"])
            peers = hosts.spawn_procs(per_host={"gpus": PER_HOST}).spawn("peers", Peer)
            answered = peers.ping.call().get(timeout=300)
            times.append(time.perf_counter() - start)
            assert len(answered) == HOSTS * PER_HOST
        finally:
            danaus.shutdown()
        time.sleep(1.0)  # the workers start their next host agents ahead of time
    rest = times[1:] or times
    return {
        "benchmark": "mesh_up_attach",
        "transport": transport,
        "hosts": HOSTS,
        "procs_per_host": PER_HOST,
        "runs": len(times),
        "first_s": round(times[0], 3),
        "median_s": round(statistics.median(rest), 3),
        "min_s": round(min(rest), 3),
        "max_s": round(max(rest), 3),
    }


def between_hosts(
    transport: str, options: dict[str, object], calls: int, mib: int, repeats: int
) -> list[dict[str, object]]:
    danaus.configure(transport=transport, **options)
    try:
        peers = danaus.hosts().spawn_procs().spawn("peers", Peer)
        first, second = peers.slice(hosts=0), peers.slice(hosts=1)
        first.round_trips.call_one(second, 20).get(timeout=300)
        rtts = sorted(first.round_trips.call_one(second, calls).get(timeout=300))
        sends = first.send.call_one(second, mib, repeats).get(timeout=600)
    finally:
        danaus.shutdown()
    median = statistics.median(sends)
    return [
        {
            "benchmark": "hosts_call_rtt",
            "transport": transport,
            "calls": calls,
            "median_us": round(statistics.median(rtts) * 1e6, 1),
            "p99_us": round(rtts[min(len(rtts) - 1, int(len(rtts) * 0.99))] * 1e6, 1),
        },
        {
            "benchmark": "hosts_payload",
            "transport": transport,
            "bytes": mib << 20,
            "repeats": repeats,
            "median_s": round(median, 4),
            "min_s": round(min(sends), 4),
            "max_s": round(max(sends), 4),
            "mb_per_s": round((mib << 20) / median / 1e6, 1),
        },
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--transport", default="tcp,ucx", help="comma-separated")
    parser.add_argument("--runs", type=int, default=5, help="mesh-up runs")
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--mib", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    why = unavailable()
    if why is not None:
        print(json.dumps({"benchmark": "multihost", "skipped": why}))
        return
    with cluster(HOSTS, danaus.make_job_key()) as hosts:
        options = hosts.controller_options()
        for transport in args.transport.split(","):
            print(json.dumps(mesh_up(transport, options, args.runs)), flush=True)
            for row in between_hosts(transport, options, args.calls, args.mib, args.repeats):
                print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
