"""How fast a dead or hung worker is noticed: signal to SupervisionError in a pending call.

Prints one JSON line: the median and max seconds from SIGKILL of a worker to the
SupervisionError of a call pending on it, and the same from SIGSTOP (a hang)
with the default heartbeat settings.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import time

import danaus
from danaus import Actor, SupervisionError, endpoint, this_host
from danaus.core.config import installed


class Sleeper(Actor):
    @endpoint
    def pid(self) -> int:
        return os.getpid()

    @endpoint
    async def nap(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


def detection_times(sig: int, samples: int) -> list[float]:
    """Seconds from sending ``sig`` to each worker to the error of the call pending on it."""
    danaus.unhandled_fault_hook = lambda failure: None
    procs = this_host().spawn_procs({"w": samples})
    sleepers = procs.spawn("sleepers", Sleeper)
    pids = list(sleepers.pid.call().get(timeout=60).values())
    times = []
    for rank, pid in enumerate(pids):
        pending = sleepers.slice(w=rank).nap.call_one(600.0)
        start = time.perf_counter()
        os.kill(pid, sig)
        error = pending.exception(timeout=120)
        times.append(time.perf_counter() - start)
        if not isinstance(error, SupervisionError):
            raise RuntimeError(f"expected a SupervisionError, got {error!r}")
    procs.stop().get(timeout=60)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--transport", default="tcp")
    parser.add_argument("--kill-samples", type=int, default=20)
    parser.add_argument("--hang-samples", type=int, default=5)
    args = parser.parse_args()
    danaus.configure(transport=args.transport)
    killed = detection_times(signal.SIGKILL, args.kill_samples)
    hung = detection_times(signal.SIGSTOP, args.hang_samples)
    world = installed()
    print(
        json.dumps(
            {
                "benchmark": "failure_detection",
                "transport": args.transport,
                "sigkill_to_error_median_s": round(statistics.median(killed), 4),
                "sigkill_to_error_max_s": round(max(killed), 4),
                "sigkill_samples": len(killed),
                "hang_to_error_median_s": round(statistics.median(hung), 3),
                "hang_to_error_max_s": round(max(hung), 3),
                "hang_samples": len(hung),
                "heartbeat_interval_s": world.options.heartbeat_interval,
                "heartbeat_timeout_s": world.options.heartbeat_timeout,
            }
        )
    )
    danaus.shutdown()


if __name__ == "__main__":
    main()
