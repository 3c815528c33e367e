"""What the dashboard costs a job, how fast its page paints, how fast it shows a busy proc's stacks.

A job of ``--procs`` worker procs (64 by default, one actor each) is the job
watched; the messaging workloads of `messaging.py` (sequential round trips,
pipelined calls, broadcast and gather to 4 procs) run in it, in phases that
alternate: the dashboard closed, then open (``danaus dashboard`` serving the
job, with a headless Chromium showing its page, which refreshes every second;
``--client events`` reads the page's event stream instead of drawing it),
``--rounds`` times each. The line reports each metric's median per phase and
the change with the dashboard open, in percent (positive: worse).

It also reports, with the dashboard open on the same job:

- the page's first paint (the browser's first-contentful-paint, from the start
  of navigation) and the time until the topology of every proc is drawn, over
  ``--loads`` fresh page loads;
- the stack dump of a proc spinning in a tight Python loop: the admin request's
  round trip, the dashboard's ``/api/stacks`` as the page asks it, and the time
  the proc took to walk its frames; and ``py-spy dump`` of the same process for
  comparison, where py-spy is installed;
- the CPU a profile's sampler takes on the proc it samples (100 samples a second),
  against the same proc idle for as long.

    python benchmarks/dashboard_overhead.py                    # 64 procs, 3 rounds
    python benchmarks/dashboard_overhead.py --procs 8 --rounds 1 --quick   # a smoke test

Nothing here asserts on speed; on a shared machine, read the spread of the rounds.
"""

from __future__ import annotations

import argparse
import dataclasses
import http.client
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))

from _workloads import FULL, QUICK, Counts, MeshFramework, broadcast_gather, call_one_rtt, pipelined
from headless_chromium import CHROMIUM, CHROMIUM_ARGS
from top_overhead import cpu_by_process, cpu_seconds

import danaus
from danaus import Actor, endpoint, this_host
from danaus.admin import jobfile, protocol
from danaus.admin.views import ProfileView, StacksView
from danaus.transports.tcp.admin import AdminClient

BIN = os.path.dirname(sys.executable)
"""Where this Python's scripts are (py-spy, if it was installed beside it)."""

WATCHER = """
import json, sys, time
from playwright.sync_api import sync_playwright

link, procs, loads, chromium = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
args = json.loads(sys.argv[5])
drawn = f"document.querySelectorAll('.cell.proc[data-state=running]').length >= {procs}"
PAINTED = "performance.getEntriesByName('first-contentful-paint').length > 0"
PAINT = "performance.getEntriesByName('first-contentful-paint')[0].startTime"

def until(page, condition):
    while not page.evaluate(condition):
        time.sleep(0.01)

with sync_playwright() as playwright:
    browser = playwright.chromium.launch(executable_path=chromium, args=args)
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    page.goto(link)
    until(page, drawn)
    address = page.url
    paints, drawings = [], []
    for _ in range(loads):
        fresh = context.new_page()
        started = time.perf_counter()
        fresh.goto(address)
        until(fresh, drawn)
        drawings.append(time.perf_counter() - started)
        # The browser records the paint's entry after the frame that painted it.
        until(fresh, PAINTED)
        paints.append(fresh.evaluate(PAINT) / 1000)
        fresh.close()
    print(json.dumps({"address": address, "paints": paints, "drawings": drawings}), flush=True)
    sys.stdin.readline()
    browser.close()
"""

EVENTS = """
import http.client, sys, threading, urllib.parse
link = urllib.parse.urlsplit(sys.argv[1])
connection = http.client.HTTPConnection(link.hostname, link.port, timeout=60)
connection.request("GET", f"/?{link.query}")
reply = connection.getresponse()
reply.read()
cookie = reply.getheader("Set-Cookie").partition(";")[0]
connection.request("GET", "/api/events", headers={"Cookie": cookie})
stream = connection.getresponse()
stream.readline()

def read():
    while stream.readline():
        pass

threading.Thread(target=read, daemon=True).start()
print("{}", flush=True)
sys.stdin.readline()
"""


class Spinner(Actor):
    @endpoint
    def pid(self) -> int:
        return os.getpid()

    @endpoint
    def crunch_numbers(self, stop: str) -> int:
        turns = 0
        while not os.path.exists(stop):
            turns += 1
        return turns


def median(values: list[float], digits: int = 4) -> float:
    return round(statistics.median(values), digits)


def spread(values: list[float], digits: int = 4) -> dict[str, float]:
    return {
        "median": median(values, digits),
        "min": round(min(values), digits),
        "max": round(max(values), digits),
    }


class Dashboard:
    """``danaus dashboard`` on the job, and a client keeping its page open."""

    def __init__(self, jobs: str, procs: int, loads: int, client: str) -> None:
        env = {**os.environ, "DANAUS_JOBS_DIR": jobs}
        self.server = subprocess.Popen(
            [sys.executable, "-m", "danaus.cli", "dashboard", "--no-browser"],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            self._open(self._link(), procs, loads, client)
        except BaseException:
            self.server.kill()
            self.server.wait()
            raise

    def _open(self, link: str, procs: int, loads: int, client: str) -> None:
        if client == "browser":
            command = [link, str(procs), str(loads), CHROMIUM, json.dumps(CHROMIUM_ARGS)]
            script = WATCHER
        else:
            command, script = [link], EVENTS
        self.client = subprocess.Popen(
            [sys.executable, "-c", script, *command],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.client.stdout is not None
        self.seen = json.loads(self.client.stdout.readline() or "null")
        if self.seen is None:
            raise SystemExit("the dashboard's page did not open")

    def _link(self) -> str:
        """The next link the server prints."""
        assert self.server.stdout is not None
        while True:
            line = self.server.stdout.readline()
            if not line:
                raise SystemExit("danaus dashboard ended")
            if line.strip().startswith("open http"):
                return line.strip().partition(" ")[2]

    def another_link(self) -> str:
        """A new link (the server prints one for each line it reads)."""
        assert self.server.stdin is not None
        self.server.stdin.write("\n")
        self.server.stdin.flush()
        return self._link()

    def close(self) -> None:
        self.client.communicate("", 60)
        self.server.send_signal(signal.SIGINT)
        self.server.wait(60)


def _job_pids() -> list[int]:
    """The pids of every process of the job (from a snapshot of it)."""
    with AdminClient(jobfile.find()) as client:
        view = client.ask(protocol.Snapshot(), timeout=60)
    return [p.pid for p in view.procs if p.pid is not None]


def workloads(one: Any, mesh: Any, counts: Any) -> dict[str, float]:
    return {
        "call_one_rtt_median_us": call_one_rtt(one, counts)["metrics"]["median_us"],
        "pipelined_calls_per_s": pipelined(one, counts)["metrics"]["calls_per_s"],
        "broadcast_gather_4_calls_per_s": broadcast_gather(mesh, counts)["metrics"]["calls_per_s"],
    }


LOWER_IS_BETTER = {"call_one_rtt_median_us"}


def scaled(counts: Counts, factor: int) -> Counts:
    """``counts`` with ``factor`` times the calls of each messaging workload.

    At messaging.py's counts a workload takes a fraction of a second, so whether
    the page's refresh (once a second) falls within it is luck; over several
    seconds each figure carries its share of what the dashboard costs.
    """
    return dataclasses.replace(
        counts,
        rtt_calls=counts.rtt_calls * factor,
        pipelined_calls=counts.pipelined_calls * factor,
        broadcast_calls=counts.broadcast_calls * factor,
    )


def stack_dumps(
    spinners: Any, dashboard: Dashboard, dumps: int, profile_seconds: float
) -> dict[str, Any]:
    """Stacks of a proc spinning in Python: through the admin socket, the page, and py-spy."""
    stop = Path(tempfile.mkdtemp(prefix="danaus-stop-")) / "stop"
    busy = spinners.slice(procs=0)
    pid = busy.pid.call_one().get(timeout=60)
    spinning = busy.crunch_numbers.call_one(str(stop))
    found: dict[str, Any] = {}
    try:
        job = jobfile.find()
        with AdminClient(job) as client:
            proc = _proc_of(client, pid)
            admin, walked = [], []
            for _ in range(dumps):
                started = time.perf_counter()
                view = protocol.expect(client.ask(protocol.Stacks(proc), timeout=60), StacksView)
                admin.append(time.perf_counter() - started)
                walked.append(view.taken_seconds)
            assert any("crunch_numbers" in f.function for t in view.threads for f in t.frames)
            found["admin_request_s"] = spread(admin)
            found["proc_walks_its_frames_s"] = spread(walked, 5)
            found["page_request_s"] = spread(_page_dumps(dashboard, proc, dumps))
            found["profile_at_100hz"] = _sampler_cost(spinners, client, profile_seconds)
        found.update(_py_spy(pid, dumps))
    finally:
        stop.touch()
    spinning.get(timeout=60)
    return found


def _py_spy(pid: int, dumps: int) -> dict[str, Any]:
    """``py-spy dump`` of the process (which stops it while it reads), and with
    ``--nonblocking`` (which does not, and may read a stack as it changes), if installed."""
    spy = shutil.which("py-spy", path=os.pathsep.join([BIN, os.environ.get("PATH", "")]))
    if spy is None:
        return {"py_spy": "not installed"}
    found: dict[str, Any] = {}
    for name, extra in (("py_spy_dump_s", []), ("py_spy_dump_nonblocking_s", ["--nonblocking"])):
        times = []
        for _ in range(dumps):
            started = time.perf_counter()
            done = subprocess.run([spy, "dump", *extra, "--pid", str(pid)], capture_output=True)
            times.append(time.perf_counter() - started)
            if done.returncode != 0:
                return {"py_spy_error": done.stderr.decode()[-300:]}
            assert b"crunch_numbers" in done.stdout
        found[name] = spread(times)
    return found


def _sampler_cost(spinners: Any, client: AdminClient, seconds: float) -> dict[str, float]:
    """The CPU an idle proc spends in ``seconds``, and while a profile samples it 100 times a
    second for as long."""
    pid = spinners.slice(procs=1).pid.call_one().get(timeout=60)
    proc = _proc_of(client, pid)
    before = cpu_seconds([pid])
    time.sleep(seconds)
    idle = cpu_seconds([pid]) - before
    before = cpu_seconds([pid])
    profile = protocol.expect(
        client.ask(protocol.Profile(proc, seconds, 100.0), timeout=60), ProfileView
    )
    sampling = cpu_seconds([pid]) - before
    return {
        "seconds": seconds,
        "samples": profile.samples,
        "idle_proc_cpu_s": round(idle, 3),
        "sampled_proc_cpu_s": round(sampling, 3),
    }


def _proc_of(client: AdminClient, pid: int) -> str:
    view = client.ask(protocol.Snapshot(), timeout=60)
    return next(p.proc_id for p in view.procs if p.pid == pid)


def _page_dumps(dashboard: Dashboard, proc: str, dumps: int) -> list[float]:
    """``/api/stacks`` as the page asks it, in a session of its own (another link's cookie)."""
    address = urlsplit(dashboard.another_link())
    connection = http.client.HTTPConnection(address.hostname, address.port, timeout=60)
    connection.request("GET", f"/?{address.query}")
    reply = connection.getresponse()
    reply.read()
    cookie = reply.getheader("Set-Cookie").partition(";")[0]
    times = []
    for _ in range(dumps):
        started = time.perf_counter()
        connection.request("GET", f"/api/stacks?proc={quote(proc)}", headers={"Cookie": cookie})
        body = connection.getresponse().read()
        times.append(time.perf_counter() - started)
        assert b"crunch_numbers" in body
    connection.close()
    return times


def _tree(pid: int) -> list[int]:
    """``pid`` and every process below it."""
    found = [pid]
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            children = (task / "children").read_text().split()
        except OSError:
            continue
        for child in children:
            found += _tree(int(child))
    return found


def idle_cpu(job: list[int], dashboard: Dashboard | None, seconds: float) -> dict[str, float]:
    """CPU milliseconds per second of the idle job, and of the dashboard's server and client."""
    parts = {"job": job}
    if dashboard is not None:
        parts["dashboard_server"] = _tree(dashboard.server.pid)
        parts["dashboard_client"] = _tree(dashboard.client.pid)
    before = {name: cpu_by_process(pids) for name, pids in parts.items()}
    time.sleep(seconds)
    used = {}
    for name, pids in parts.items():
        after = cpu_by_process(pids)
        # The browser starts and ends helper processes as it goes: those that ran throughout.
        spent = sum(after[pid] - before[name][pid] for pid in after.keys() & before[name].keys())
        used[f"{name}_cpu_ms_per_s"] = round(1000 * spent / seconds, 1)
    return used


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--procs", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3, help="phases of each kind")
    parser.add_argument("--quick", action="store_true", help="small counts, a smoke test")
    parser.add_argument(
        "--scale",
        type=int,
        default=5,
        help="calls per workload, in times messaging.py's (a phase then spans several refreshes)",
    )
    parser.add_argument("--loads", type=int, default=10, help="page loads timed")
    parser.add_argument("--dumps", type=int, default=20, help="stack dumps timed")
    parser.add_argument(
        "--idle-seconds", type=float, default=5.0, help="CPU of the idle job measured over this"
    )
    parser.add_argument(
        "--profile-seconds", type=float, default=3.0, help="length of the profile measured"
    )
    parser.add_argument(
        "--client",
        choices=["browser", "events"],
        default="browser" if os.access(CHROMIUM, os.X_OK) else "events",
        help="what keeps the page open: headless Chromium (where installed), or an event reader",
    )
    parser.add_argument(
        "--heartbeat-timeout",
        type=float,
        default=30.0,
        help="seconds (starting 64 procs on a small, busy machine starves heartbeats)",
    )
    args = parser.parse_args(argv)
    counts = QUICK if args.quick else scaled(FULL, args.scale)

    jobs = tempfile.mkdtemp(prefix="danaus-jobs-")
    os.environ["DANAUS_JOBS_DIR"] = jobs
    danaus.configure(
        transport="tcp", heartbeat_interval=1.0, heartbeat_timeout=args.heartbeat_timeout
    )
    procs = this_host().spawn_procs(per_host={"procs": args.procs})
    spinners = procs.spawn("spinner", Spinner)
    spinners.pid.call().get(timeout=300)
    framework = MeshFramework(danaus)
    bench_procs = framework.spawn_procs(4)
    mesh = framework.spawn(bench_procs)
    mesh.echo.call(0).get(timeout=300)
    one = mesh.slice(gpus=0)
    watched = args.procs + 4 + 1
    workloads(one, mesh, QUICK)  # warm up

    job = _job_pids()
    closed: list[dict[str, float]] = []
    opened: list[dict[str, float]] = []
    idle: list[dict[str, float]] = []
    paints: list[float] = []
    drawings: list[float] = []
    stacks: dict[str, Any] = {}
    for round_ in range(args.rounds):
        print(f"round {round_ + 1} of {args.rounds}", file=sys.stderr, flush=True)
        closed.append(workloads(one, mesh, counts))
        idle.append({"closed": idle_cpu(job, None, args.idle_seconds)})
        dashboard = Dashboard(jobs, watched, args.loads if round_ == 0 else 0, args.client)
        try:
            opened.append(workloads(one, mesh, counts))
            idle[-1]["open"] = idle_cpu(job, dashboard, args.idle_seconds)
            if args.client == "browser":
                paints += dashboard.seen["paints"]
                drawings += dashboard.seen["drawings"]
            if round_ == args.rounds - 1:
                stacks = stack_dumps(spinners, dashboard, args.dumps, args.profile_seconds)
        finally:
            dashboard.close()
    metrics = {}
    for name in closed[0]:
        shut = median([c[name] for c in closed], 1)
        shown = median([o[name] for o in opened], 1)
        worse = (shown - shut) / shut if name in LOWER_IS_BETTER else (shut - shown) / shut
        metrics[name] = {
            "closed": shut,
            "open": shown,
            "closed_runs": [c[name] for c in closed],
            "open_runs": [o[name] for o in opened],
            "worse_with_dashboard_open_percent": round(100 * worse, 1),
        }
    line = {
        "benchmark": "dashboard_overhead",
        "procs": args.procs,
        "procs_on_the_page": watched,
        "rounds": args.rounds,
        "counts": "quick" if args.quick else f"{args.scale} x messaging.py's",
        "client": args.client,
        "messaging": metrics,
        "idle_cpu": {
            "job_closed_cpu_ms_per_s": median([i["closed"]["job_cpu_ms_per_s"] for i in idle], 1),
            **{
                name.replace("_cpu", "_open_cpu"): median([i["open"][name] for i in idle], 1)
                for name in idle[0]["open"]
            },
            "rounds": idle,
        },
        "stacks_of_a_busy_proc": stacks,
    }
    if paints:
        line["page"] = {
            "loads": len(paints),
            "first_contentful_paint_s": spread(paints, 3),
            "topology_drawn_s": spread(drawings, 3),
        }
    print(json.dumps(line))
    danaus.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
