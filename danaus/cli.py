"""The ``danaus`` command: run programs on the simulator or for real, watch and debug running
jobs, serve as a host's worker, manage jobs and keys, and run chaos scenarios.

Every command's mistakes are one line on stderr (`danaus.argparsing`).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import runpy
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from danaus.argparsing import TRACE_HELP, CommandError, Parser, UsageError, positive_int
from danaus.wording import counted

DESCRIPTION = (
    "Run single-controller distributed programs on meshes of actors: on the simulator "
    "(sim), for real (run), under faults (chaos); watch (top) and debug (debug) a running "
    "job; serve a host as a worker (worker); manage jobs (job) and their keys (key)."
)
def load(target: str) -> Callable[..., Any]:
    """Load ``path/to/file.py::name`` (or ``package.module::name``)."""
    location, sep, name = target.partition("::")
    if not sep or not name:
        raise UsageError(f"expected PATH.py::NAME or module::NAME, got {target!r}")
    if location.endswith(".py"):
        path = Path(location).resolve()
        if not path.is_file():
            raise UsageError(f"no such file: {location}")
        module_name = path.stem
        sys.path.insert(0, str(path.parent))
        spec = importlib.util.spec_from_file_location(module_name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
    else:
        try:
            module = importlib.import_module(location)
        except ModuleNotFoundError as exc:
            raise UsageError(f"no module {location!r} ({exc})") from None
    try:
        return getattr(module, name)
    except AttributeError:
        raise UsageError(f"{location} has no {name!r}") from None


def _sim(args: argparse.Namespace) -> int:
    import danaus.sim
    from danaus.tracing import write

    main = load(args.target)
    if not callable(main):
        raise UsageError(f"{args.target} is not a function but {type(main).__name__}")
    result = danaus.sim.run(main, hosts=args.hosts, seed=args.seed)
    for path in args.trace:
        write(result.trace.events, path, f"{args.target} seed {args.seed}")
    print(f"result: {result.value!r}")
    print(f"simulated time: {result.time:.6f} s, {len(result.trace)} trace events")
    print(f"trace digest: {result.digest}")
    return 0


def _job(selector: str | None) -> Any:
    from danaus.admin import jobfile

    try:
        return jobfile.find(selector)
    except (LookupError, PermissionError, ValueError) as exc:
        raise CommandError(str(exc)) from None


def _top(args: argparse.Namespace) -> int:
    from danaus.admin.protocol import Snapshot, Stacks, expect
    from danaus.admin.views import StacksView
    from danaus.transports.tcp.admin import AdminClient

    try:
        from danaus.admin.top import TopApp
    except ImportError as exc:
        raise CommandError(f"needs textual ({exc}): pip install 'danaus[top]'") from None

    job = _job(args.job)
    # Stacks are asked from another thread than snapshots: each has a connection of its own.
    with AdminClient(job) as client, AdminClient(job) as stacks_client:
        TopApp(
            lambda: client.ask(Snapshot(), timeout=10),
            interval=args.interval,
            stacks=lambda proc: expect(stacks_client.ask(Stacks(proc), timeout=10), StacksView),
        ).run()
    return 0


def _debug(args: argparse.Namespace) -> int:
    from danaus.debug.repl import DebugRepl
    from danaus.transports.tcp.admin import AdminClient

    with AdminClient(_job(args.job)) as client:
        try:
            return DebugRepl(client).run()
        except ConnectionError as exc:
            raise CommandError(str(exc)) from None


SIM_INTERVAL = 0.25
"""Seconds between a simulated run's views on its dashboard: replays move smoothly."""


def _dashboard(args: argparse.Namespace) -> int:
    import asyncio

    try:
        from danaus.dashboard.launch import run
        from danaus.dashboard.server import INTERVAL
    except ImportError as exc:
        raise CommandError(f"needs aiohttp ({exc}): pip install 'danaus[dashboard]'") from None
    source: Any
    if args.sim is not None:
        from danaus.dashboard.simulated import SimSource

        source = SimSource(load(args.sim), args.sim, hosts=args.hosts, seed=args.seed)
    else:
        from danaus.dashboard.sources import JobSource

        source = JobSource(_job(args.job))
    interval = args.interval or (SIM_INTERVAL if args.sim is not None else INTERVAL)
    try:
        asyncio.run(
            run(source, args.host, args.port, args.reports, interval, not args.no_browser)
        )
    except KeyboardInterrupt:
        pass
    except OSError as exc:
        raise CommandError(str(exc)) from None
    return 0


def _run(args: argparse.Namespace) -> int:
    import danaus
    from danaus.core.settings import variable

    if not os.path.isfile(args.script):
        raise UsageError(f"no such file: {args.script}")
    if args.trace:
        traces = os.pathsep.join(os.path.abspath(path) for path in args.trace)
        os.environ[variable("trace")] = traces
    sys.argv = [args.script, *args.args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(args.script)))
    try:
        runpy.run_path(args.script, run_name="__main__")
    finally:
        danaus.shutdown()
    for path in args.trace:
        print(f"trace: {path}", file=sys.stderr)
    return 0


def _worker(args: argparse.Namespace) -> int:
    from danaus.workers import run_worker_loop_forever

    try:
        run_worker_loop_forever(
            address=args.listen,
            key=Path(args.key_file) if args.key_file else None,
            name=args.name,
            exit_on_disconnect=args.once,
            address_file=args.address_file,
        )
    except (ValueError, PermissionError) as exc:
        raise UsageError(str(exc)) from None
    return 0


def _jobs(args: argparse.Namespace) -> int:
    import danaus
    from danaus import job as jobs

    try:
        if args.action == "apply":
            job = load(args.target)
            if not isinstance(job, jobs.Job):
                raise UsageError(f"{args.target} is not a danaus.job.Job but {type(job).__name__}")
            if args.script is not None:
                if not isinstance(job, jobs.SlurmJob):
                    raise UsageError("--script (batch mode) needs a SlurmJob")
                job.apply(client_script=args.script, args=args.args)
            else:
                job.apply()
            print(f"applied the {job.kind} job in {job.directory}")
        elif args.action == "state":
            job = jobs.load(args.dir)
            state, addresses = job.state(), job.addresses()
            for name in state:
                state[name].initialized.get(timeout=args.timeout)
                hosts = counted(len(state[name]), "host")
                print(f"{name}: {hosts}, attached: {' '.join(addresses[name])}")
            danaus.shutdown()
        else:
            job = jobs.load(args.dir)
            job.kill()
            print(f"killed the {job.kind} job in {job.directory}")
    except (jobs.JobNotApplied, jobs.SchedulerMissing, RuntimeError, ValueError) as exc:
        raise CommandError(str(exc)) from None
    return 0


def _key(args: argparse.Namespace) -> int:
    from danaus.workers import make_job_key

    if args.out is None:
        print(make_job_key())
        return 0
    try:
        make_job_key(args.out)
    except FileExistsError:
        raise UsageError(f"{args.out} exists already; a key is never overwritten") from None
    print(f"wrote a new job key to {args.out} (readable by you only)")
    return 0


def _command(commands: Any, name: str, handler: Callable[..., int], **kwargs: Any) -> Parser:
    """A command (or sub-command) that runs ``handler``; its mistakes are reported as its own."""
    parser: Parser = commands.add_parser(name, **kwargs)
    parser.set_defaults(handler=handler, command=parser)
    return parser


def add_job_commands(commands: Any) -> None:
    """``danaus job apply|state|kill``."""
    from danaus.job.base import DEFAULT_DIRECTORY

    job = commands.add_parser("job", help="apply a job (local, SLURM, Kubernetes), see it, kill it")
    actions = job.add_subparsers(dest="action", required=True, metavar="ACTION")
    apply = _command(actions, "apply", _jobs, help="start the job's hosts (and its batch script)")
    apply.add_argument("target", help="PATH.py::NAME or module::NAME naming a danaus.job.Job")
    apply.add_argument(
        "--script", help="SLURM batch mode: run this controller script inside the allocation"
    )
    apply.add_argument("args", nargs=argparse.REMAINDER, help="the script's arguments")
    state = _command(
        actions, "state", _jobs, help="attach to the job's workers and list its meshes"
    )
    state.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for them")
    kill = _command(actions, "kill", _jobs, help="end every worker and allocation of the job")
    for action in (state, kill):
        action.add_argument("--dir", default=str(DEFAULT_DIRECTORY), help="the job's directory")


def parser() -> Parser:
    """The ``danaus`` command's parser, with every command."""
    from danaus import __version__
    from danaus.chaos.cli import add_commands

    top_level = Parser(prog="danaus", description=DESCRIPTION)
    top_level.add_argument("--version", action="version", version=f"danaus {__version__}")
    commands = top_level.add_subparsers(dest="name", required=True, metavar="COMMAND")
    sim = _command(
        commands, "sim", _sim, help="run a program on the simulator and print its trace digest"
    )
    sim.add_argument("target", help="PATH.py::FUNCTION or module::FUNCTION, the controller's main")
    sim.add_argument("--hosts", type=positive_int, default=1, help="simulated hosts")
    sim.add_argument("--seed", type=int, default=0, help="the seed of the network and faults")
    sim.add_argument("--trace", metavar="FILE", action="append", default=[], help=TRACE_HELP)
    run = _command(commands, "run", _run, help="run a controller script (optionally tracing it)")
    run.add_argument("script", help="the controller script")
    run.add_argument("args", nargs=argparse.REMAINDER, help="the script's arguments")
    run.add_argument(
        "--trace",
        metavar="FILE",
        action="append",
        default=[],
        help=f"record every proc's events; at exit, {TRACE_HELP}",
    )
    top = _command(commands, "top", _top, help="watch a running job: procs, actors, failures")
    top.add_argument("job", nargs="?", help="the controller's pid or job file (default: newest)")
    top.add_argument("--interval", type=float, default=1.0, help="seconds between refreshes")
    debug = _command(
        commands, "debug", _debug, help="attach to ranks of a running job stopped at breakpoint()"
    )
    debug.add_argument("job", nargs="?", help="the controller's pid or job file (default: newest)")
    dashboard = _command(
        commands,
        "dashboard",
        _dashboard,
        help="a live web page of a running job (or of a simulated run)",
    )
    dashboard.add_argument(
        "job", nargs="?", help="the controller's pid or job file (default: newest)"
    )
    dashboard.add_argument("--host", default="127.0.0.1", help="address to listen on (loopback)")
    dashboard.add_argument("--port", type=int, default=0, help="port to listen on (0: a free one)")
    dashboard.add_argument("--no-browser", action="store_true", help="print the link only")
    dashboard.add_argument(
        "--interval",
        type=float,
        help="seconds between refreshes while a page is open (1; 0.25 for a simulation)",
    )
    dashboard.add_argument(
        "--reports",
        action="append",
        default=[],
        metavar="PATH",
        help="a report file or a directory of them to serve beside the job (repeatable)",
    )
    dashboard.add_argument(
        "--sim", metavar="PATH::FUNCTION", help="show this program's run on the simulator instead"
    )
    dashboard.add_argument("--seed", type=int, default=0, help="the simulated run's seed")
    dashboard.add_argument(
        "--hosts", type=positive_int, default=1, help="the simulated run's hosts"
    )
    worker = _command(
        commands, "worker", _worker, help="serve as this host's worker: wait for a controller"
    )
    worker.add_argument(
        "--listen", required=True, help="ADDRESS[:PORT] of this host to listen on (port 26600)"
    )
    worker.add_argument("--name", help="this host's name in reports and output (its host name)")
    worker.add_argument(
        "--key-file",
        help="a file holding the job's key, readable by its owner only "
        "(default: DANAUS_JOB_KEY, else the file DANAUS_JOB_KEY_FILE names)",
    )
    worker.add_argument(
        "--once", action="store_true", help="exit when the first controller is done"
    )
    worker.add_argument(
        "--address-file",
        help="write the address it listens on to this file once it listens "
        "(with port 0, which picks a free port)",
    )
    key = _command(
        commands, "key", _key, help="make a new job key for workers and their controller"
    )
    key.add_argument("--out", help="write it to this new file (mode 600) instead of stdout")
    add_job_commands(commands)
    add_commands(commands, load, _command)
    return top_level


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.handler(args)
    except CommandError as error:
        return args.command.fail(error)


if __name__ == "__main__":
    sys.exit(main())
