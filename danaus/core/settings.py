"""Settings: everything a program may set, declared once, and the one reader of the environment.

Each field of `Settings` is a keyword argument of ``danaus.configure``, and
each field but two objects (``network``, ``host_control``) may come from an
environment variable as well: ``DANAUS_`` and its name in capitals
(``wait_spin_us``: ``DANAUS_WAIT_SPIN_US``). ``configure`` wins over the
environment, which wins over the default. `Settings.from_environment` is the
only code of Danaus that reads those variables.

The fields are of three kinds:

* the job's options (`JobOptions`, whose fields `Settings` inherits, with
  `Limits`'): every proc of a job has its controller's. On ``tcp``, ``ucx``
  and ``verbs`` they travel in the bootstrap of each proc the job starts, on
  every host; on ``sim`` every proc shares the controller's world;
* the run's: which transport, which hosts, and how the controller reaches them
  (``transport``, ``workers``, ``job_key``, the simulator's ``hosts`` and ``seed``);
* the process's own (`PROCESS_FIELDS`): facts about a host and conveniences of
  one process (which RDMA device, where to keep files, progress bars). Each
  process reads them from its own environment, which the processes it starts
  inherit; ``configure`` sets them for this process alone.
"""

from __future__ import annotations

import math
import os
import typing
from collections.abc import Callable, Mapping
from functools import cache
from typing import Any

import msgspec

from danaus.core.faults import HostControl
from danaus.core.suggest import close_names
from danaus.core.wire import MAX_FANOUT, MAX_HEADER_BYTES

MiB = 1024 * 1024
PREFIX = "DANAUS_"
"""What the environment variable of a field starts with; its name in capitals follows."""

DEFAULT_MAX_MESSAGE_BYTES = 4096 * MiB
"""The payload limit of a message on the real transports when the job sets none."""
MIN_FRAME_BYTES = 64 * 1024
"""Below this, a handshake or an RDMA header might not fit in one frame."""
FRAME_OVERHEAD = 1024
"""Room left in each frame for what wraps its bytes (CURVE adds 33 bytes to each)."""
ENVELOPE_ROOM = MAX_HEADER_BYTES + 1024
"""Bytes a message may hold beyond its payload: its envelope (at most ``wire.MAX_HEADER_BYTES``),
and what a transport adds to it (a kind frame, a sequence number)."""
MAX_WAIT_SPIN_US = 100_000
"""The longest spin a job may ask for: past that, a wait is better asleep."""
TRANSPORTS = ("sim", "tcp", "ucx", "verbs")


class Limits(msgspec.Struct, frozen=True, kw_only=True):
    """What a proc lets a peer make it allocate or wait for: the job's limits.

    Before a peer has proved that it belongs to the job it is a stranger, and a
    stranger may make a proc hold at most ``frame_bytes`` per connection, for at
    most ``handshake_timeout`` seconds; at most ``max_pending_handshakes``
    strangers are heard at once. After it has proved itself, a message's payload
    may hold at most ``max_message_bytes`` (its envelope and the transport's
    framing may add `ENVELOPE_ROOM`), checked before anything is allocated for
    it: a larger message is refused, and its sender told. Senders check the same
    limit before they send. A host runs at most ``max_procs_per_host`` procs of
    a job at once, whichever requests started them, and no more than its memory
    holds.
    """

    max_message_bytes: int | None = None
    """The largest payload of one message, in bytes (its pickled arguments, answer or value; its
    envelope comes on top): the runtime refuses to send a larger one and a proc refuses to receive
    one. None: 4 GiB on tcp, ucx and verbs, no limit on sim. Environment:
    ``DANAUS_MAX_MESSAGE_BYTES``."""
    frame_bytes: int = 4 * MiB
    """The largest zmq frame a proc reads, before authentication too, and one record of a data
    connection; larger buffers travel in chunks of about this size (at least 64 KiB). Environment:
    ``DANAUS_FRAME_BYTES``."""
    handshake_timeout: float = 5.0
    """Seconds a connection may take to prove it belongs to the job. Environment:
    ``DANAUS_HANDSHAKE_TIMEOUT``."""
    max_pending_handshakes: int = 64
    """Data connections (tcp, ucx) that may be proving themselves at once; more are refused.
    Environment: ``DANAUS_MAX_PENDING_HANDSHAKES``."""
    max_procs_per_host: int = 1024
    """The most procs of the job a host runs at once, whichever ``spawn_procs`` started them; a
    request beyond it, or beyond what the host's memory holds, is refused before any of its procs
    starts. Environment: ``DANAUS_MAX_PROCS_PER_HOST``."""

    @property
    def payload_bytes(self) -> int:
        """The largest payload of a message on a real transport (``max_message_bytes``, or its
        default there)."""
        if self.max_message_bytes is None:
            return DEFAULT_MAX_MESSAGE_BYTES
        return self.max_message_bytes

    @property
    def message_bytes(self) -> int:
        """The most bytes of one message, all its frames together, a proc reads."""
        return self.payload_bytes + ENVELOPE_ROOM

    @property
    def message_limit(self) -> str:
        """The limit on a message, as a refusal names it."""
        return (
            f"more than the job's max_message_bytes, {self.payload_bytes}, "
            f"and {ENVELOPE_ROOM} for its envelope"
        )

    @property
    def chunk_bytes(self) -> int:
        """Bytes of a large buffer that travel in one frame."""
        return self.frame_bytes - FRAME_OVERHEAD


class JobOptions(Limits, frozen=True, kw_only=True):
    """The options every proc of a job has: its controller's (see the module's docstring)."""

    cast_fanout: int = 8
    """How many procs a cast's sender, and each proc that passes it on, sends it to at most (2 to
    1024; `danaus.core.casting`). Environment: ``DANAUS_CAST_FANOUT``."""
    heartbeat_interval: float = 0.5
    """Seconds between the controller's heartbeats to each worker process. Environment:
    ``DANAUS_HEARTBEAT_INTERVAL``."""
    heartbeat_timeout: float = 3.0
    """Seconds of silence after which a worker is declared lost (and killed), and after which a
    worker that no longer hears its controller exits; more than ``heartbeat_interval``. Environment:
    ``DANAUS_HEARTBEAT_TIMEOUT``."""
    encrypt: bool = True
    """Encrypt traffic between processes (CURVE on control sockets, AES-256-GCM on data
    connections); False keeps authentication but sends in clear, on loopback only. Environment:
    ``DANAUS_ENCRYPT``."""
    trace: bool | str = False
    """True records every proc's sends, receipts, spawns and stops (`danaus.tracing`); a file name
    (several separated by ``:``) also has the controller write them there at shutdown. Environment:
    ``DANAUS_TRACE``."""
    preload: tuple[str, ...] = ()
    """Modules the fork server imports before it forks procs, with the controller's ``sys.path``
    (comma-separated in the environment). Environment: ``DANAUS_PRELOAD``."""
    home_cpus: bool = True
    """Keep each proc's runtime loop thread on a CPU of its own while the host has CPUs left, and
    have its other threads wait for messages there (`danaus.core.home_cpu`). Environment:
    ``DANAUS_HOME_CPUS``."""
    wait_spin_us: int = 200
    """How long, in µs, a proc's threads poll for a message or a hand-off before they sleep,
    yielding their CPU between polls (`danaus.core.awake`); 0 sleeps at once; at most 100,000.
    Environment: ``DANAUS_WAIT_SPIN_US``."""
    log_level: str = "INFO"
    """The level of Python logging in the job's worker processes, whose records reach the
    controller's stderr. Environment: ``DANAUS_LOG_LEVEL``."""


class Settings(JobOptions, frozen=True, kw_only=True):
    """Every setting of Danaus: the job's options (inherited from `JobOptions` and `Limits`),
    the run's, and the process's own. Each is a keyword argument of ``danaus.configure`` and,
    but ``network`` and ``host_control``, the environment variable ``DANAUS_<NAME>``."""

    transport: str = "tcp"
    """Which transport runs the program: ``tcp``, ``sim``, ``ucx`` or ``verbs``. Environment:
    ``DANAUS_TRANSPORT``."""
    bind_host: str = "127.0.0.1"
    """The address the controller's sockets listen on; name one that the workers reach for a job on
    other hosts (tcp, ucx, verbs). Environment: ``DANAUS_BIND_HOST``."""
    workers: tuple[str, ...] = ()
    """The job's workers (comma-separated in the environment): the controller attaches to them when
    it starts, ``hosts()`` is a mesh of them and ``this_host()`` the first of them. Environment:
    ``DANAUS_WORKERS``."""
    job_key: str | os.PathLike[str] | None = None
    """The key shared with the workers: its text, or a ``pathlib.Path`` to a file holding it.
    Environment: ``DANAUS_JOB_KEY``."""
    job_key_file: str | None = None
    """A file holding the job's key, read when ``job_key`` is not set. Environment:
    ``DANAUS_JOB_KEY_FILE``."""
    admin: bool = True
    """Serve ``danaus top``, ``danaus debug`` and ``danaus dashboard`` on an admin socket.
    Environment: ``DANAUS_ADMIN``."""
    admin_host: str = "127.0.0.1"
    """The address the admin socket listens on. Environment: ``DANAUS_ADMIN_HOST``."""
    host_control: HostControl | None = None
    """Power over the workers' machines and the network between them, for chaos runs
    (`danaus.transports.tcp.faults`). No environment variable."""
    hosts: int = 1
    """How many hosts the simulator simulates; ``danaus.hosts()`` is a mesh of them. Environment:
    ``DANAUS_HOSTS``."""
    seed: int = 0
    """The seed of every random choice of the simulator (and of Python's ``random``). Environment:
    ``DANAUS_SEED``."""
    network: Any = None
    """The simulator's `danaus.sim.NetworkModel` (None: its defaults). No environment variable."""
    time_limit: float = math.inf
    """Simulated seconds after which a simulated run stops with `SimulationTimeLimit`. Environment:
    ``DANAUS_TIME_LIMIT``."""
    schedule_seed: int = 0
    """Which order of concurrent events the simulator explores; 0 is the default order. Environment:
    ``DANAUS_SCHEDULE_SEED``."""
    trace_dir: str | None = None
    """A folder where each simulated world writes its trace as JSON lines at shutdown. Environment:
    ``DANAUS_TRACE_DIR``."""
    progress: bool | None = None
    """Show progress bars on stderr (None: when stderr is a terminal; 1 in the environment also
    shows them at once). Environment: ``DANAUS_PROGRESS``."""
    jobs_dir: str | None = None
    """Where job files live, which ``danaus top`` and ``danaus debug`` read (None:
    ``$XDG_RUNTIME_DIR/danaus/jobs``, else ``~/.danaus/jobs``). Environment: ``DANAUS_JOBS_DIR``."""
    cache_dir: str | None = None
    """Where compiled libraries are kept (None: ``$XDG_CACHE_HOME/danaus``, else
    ``~/.cache/danaus``). Environment: ``DANAUS_CACHE_DIR``."""
    ucx_bulk: str = "auto"
    """Where large messages travel over UCX on ``ucx``: ``auto``, to other hosts over an RDMA
    fabric; ``ucx``, everywhere. Environment: ``DANAUS_UCX_BULK``."""
    ucx_rma: bool = True
    """One-sided `RDMABuffer` transfers on ``ucx``; off, the owner's transport thread serves them.
    Environment: ``DANAUS_UCX_RMA``."""
    verbs_provider: str = "pyverbs"
    """What ``verbs`` runs on: ``pyverbs``, the RDMA hardware, or ``emulated``, a device emulated
    between processes (a test facility). Environment: ``DANAUS_VERBS_PROVIDER``."""
    verbs_device: str | None = None
    """The RDMA device ``verbs`` opens (``mlx5_0``; None: the first with an active port).
    Environment: ``DANAUS_VERBS_DEVICE``."""
    verbs_port: int | None = None
    """Its port (None: its first active port). Environment: ``DANAUS_VERBS_PORT``."""
    verbs_gid_index: int | None = None
    """The GID queue pairs are routed with (None: on RoCE, the first RoCE v2 GID of an IPv4 address,
    else 0; on InfiniBand, 0). Environment: ``DANAUS_VERBS_GID_INDEX``."""
    verbs_timeout: int = 18
    """The ACK timeout of ``verbs``, as its exponent: 4.096 µs * 2^n (1 to 31). Environment:
    ``DANAUS_VERBS_TIMEOUT``."""
    verbs_retry_count: int = 7
    """How often ``verbs`` sends again a request that gets no answer before it fails (0 to 7).
    Environment: ``DANAUS_VERBS_RETRY_COUNT``."""
    verbs_cache_bytes: int = 256 * MiB
    """How many bytes of idle memory registrations ``verbs`` keeps. Environment:
    ``DANAUS_VERBS_CACHE_BYTES``."""
    observer: str | None = None
    """The module whose ``observer()`` instruments each proc (`danaus.core.observer`; set by
    ``danaus.otel.enable``). Environment: ``DANAUS_OBSERVER``."""
    otel_exporter: str = "otlp"
    """Where `danaus.otel` sends spans and metrics: ``otlp``, ``console`` or ``memory``.
    Environment: ``DANAUS_OTEL_EXPORTER``."""

    def job_options(self) -> JobOptions:
        """The job's options among these settings: what every proc of the job gets."""
        return JobOptions(**{name: getattr(self, name) for name in JobOptions.__struct_fields__})

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] = os.environ) -> Settings:
        """The settings the environment gives, checked (``ValueError`` naming a variable).

        Unset and empty variables leave their field's default.
        """
        values: dict[str, Any] = {}
        for name in cls.__struct_fields__:
            text = environ.get(variable(name), "").strip() if name in _VARIABLES else ""
            if text:
                values[name] = _from_text(name, text)
        return cls(**values).checked()

    @staticmethod
    def read(name: str, environ: Mapping[str, str] = os.environ) -> Any:
        """Field ``name`` as the environment gives it, else its default: one field of
        `from_environment`, read where reading them all would cost too much."""
        text = environ.get(variable(name), "").strip() if name in _VARIABLES else ""
        return _from_text(name, text) if text else _defaults()[name]

    def given(self, **fields: Any) -> Settings:
        """These settings with ``fields`` (from ``configure``) in place of theirs, checked.

        Raises `TypeError` for a field that does not exist or a value of the wrong type, and
        `ValueError` for a value out of its range, each naming the field.
        """
        for name, value in fields.items():
            _check_type(name, value)
            problem = _problem(name, value)
            if problem is not None:
                raise ValueError(f"{name} {problem}, not {value!r}")
        return msgspec.structs.replace(self, **_normalized(fields)).checked()

    def checked(self) -> Settings:
        """These settings, once the rules between fields hold (``ValueError`` if one does not)."""
        if self.heartbeat_timeout <= self.heartbeat_interval:
            raise ValueError("need 0 < heartbeat_interval < heartbeat_timeout")
        if self.max_message_bytes is not None and self.frame_bytes > self.max_message_bytes:
            raise ValueError(
                f"frame_bytes ({self.frame_bytes}) must not exceed "
                f"max_message_bytes ({self.max_message_bytes})"
            )
        return self


FIELDS: tuple[str, ...] = Settings.__struct_fields__
"""Every setting, in the order of the reference."""
PROCESS_FIELDS = frozenset(
    {
        "trace_dir",
        "progress",
        "jobs_dir",
        "cache_dir",
        "ucx_bulk",
        "ucx_rma",
        "observer",
        "otel_exporter",
        *(name for name in FIELDS if name.startswith("verbs_")),
    }
)
"""The settings of each process of its own (see the module's docstring)."""
EVERY_TRANSPORT = frozenset(
    {"transport", "cast_fanout", "max_message_bytes", "progress", "observer", "otel_exporter"}
)
"""The settings every transport takes; each transport names the others it takes (``OPTIONS``)."""
_VARIABLES = frozenset(FIELDS) - {"network", "host_control"}
"""The fields that an environment variable may set (the others are objects)."""


def variable(name: str) -> str:
    """The environment variable of setting ``name``."""
    return PREFIX + name.upper()


def unknown(name: str, known: frozenset[str] | tuple[str, ...], where: str) -> TypeError:
    """The error for a setting ``name`` that ``where`` does not take, naming those it takes."""
    return TypeError(
        f"configure(): {where} has no option {name!r}{close_names(name, sorted(known))}; "
        f"its options: {', '.join(sorted(known))}"
    )


@cache
def _hints() -> dict[str, Any]:
    return typing.get_type_hints(Settings)


@cache
def _defaults() -> dict[str, Any]:
    return {field.name: field.default for field in msgspec.structs.fields(Settings)}


def _kind(hint: Any) -> str:
    """What a value of type ``hint`` is, in words."""
    words = {
        int: "an int",
        float: "a number",
        bool: "True or False",
        str: "a str",
        tuple[str, ...]: "a list of str",
    }
    options = [words.get(arg, getattr(arg, "__name__", str(arg))) for arg in typing.get_args(hint)]
    if not options:
        return words.get(hint, getattr(hint, "__name__", str(hint)))
    return " or ".join(word if word != "NoneType" else "None" for word in options)


def _check_type(name: str, value: Any) -> None:
    if name not in FIELDS:
        raise unknown(name, FIELDS, "Danaus")
    if name == "job_key":
        if value is not None and not isinstance(value, (str, bytes, os.PathLike)):
            raise TypeError(f"job_key must be the key's text or a path, not {value!r}")
        return
    if name in ("workers", "preload") and isinstance(value, str):
        raise TypeError(f"{name} must be a list of str, not one string ({value!r})")
    try:
        msgspec.convert(value, _hints()[name])
    except msgspec.ValidationError:
        raise TypeError(f"{name} must be {_kind(_hints()[name])}, not {value!r}") from None


def _normalized(fields: Mapping[str, Any]) -> dict[str, Any]:
    """``fields`` as their fields hold them (a list as a tuple, an int as a float)."""
    return {
        name: value if name == "job_key" else msgspec.convert(value, _hints()[name])
        for name, value in fields.items()
    }


def _from_text(name: str, text: str) -> Any:
    """The value of field ``name`` that its variable's ``text`` gives, checked."""
    hint = _hints()[name]
    source = f"{variable(name)}={text!r}"
    try:
        if name in ("workers", "preload"):
            value: Any = tuple(part.strip() for part in text.split(",") if part.strip())
        elif name == "trace":
            value = text
        elif int in typing.get_args(hint) or hint is int:
            value = int(text)
        elif hint is float:
            value = float(text)
        elif bool in typing.get_args(hint) or hint is bool:
            value = _boolean(text)
        else:
            value = text
    except ValueError:
        raise ValueError(f"{source} is not {_kind(hint)}") from None
    problem = _problem(name, value)
    if problem is not None:
        raise ValueError(f"{source}: {name} {problem}")
    return value


def _boolean(text: str) -> bool:
    lowered = text.lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError(text)


def _at_least(lowest: int) -> Callable[[Any], str | None]:
    return lambda value: None if value is None or value >= lowest else f"must be at least {lowest}"


def _within(lowest: int, highest: int) -> Callable[[Any], str | None]:
    def check(value: Any) -> str | None:
        if value is None or lowest <= value <= highest:
            return None
        return f"must be from {lowest} to {highest}"

    return check


def _positive_seconds(value: float) -> str | None:
    return None if 0 < value < math.inf else "must be a positive, finite number of seconds"


def _one_of(*choices: str) -> Callable[[str], str | None]:
    return lambda value: None if value in choices else f"must be one of {', '.join(choices)}"


def _modules(names: tuple[str, ...]) -> str | None:
    for name in names:
        if not all(part.isidentifier() for part in name.split(".")):
            return f"names modules only: {name!r} is not one"
    return None


_RULES: dict[str, Callable[[Any], str | None]] = {
    "max_message_bytes": _at_least(1),
    "frame_bytes": _at_least(MIN_FRAME_BYTES),
    "handshake_timeout": _positive_seconds,
    "max_pending_handshakes": _at_least(1),
    "max_procs_per_host": _at_least(1),
    "cast_fanout": _within(2, MAX_FANOUT),
    "heartbeat_interval": _positive_seconds,
    "heartbeat_timeout": _positive_seconds,
    "preload": _modules,
    "wait_spin_us": _within(0, MAX_WAIT_SPIN_US),
    "transport": _one_of(*TRANSPORTS),
    "hosts": _at_least(1),
    "time_limit": lambda value: None if value > 0 else "must be a positive number of seconds",
    "ucx_bulk": _one_of("auto", "ucx"),
    "verbs_provider": _one_of("pyverbs", "emulated"),
    "verbs_port": _within(1, 255),
    "verbs_gid_index": _within(0, 1 << 16),
    "verbs_timeout": _within(1, 31),
    "verbs_retry_count": _within(0, 7),
    "verbs_cache_bytes": _within(0, 1 << 62),
    "otel_exporter": _one_of("otlp", "console", "memory"),
}
"""What a value of each field must be beyond its type (fields not named here: any)."""


def _problem(name: str, value: Any) -> str | None:
    """What is wrong with ``value`` for field ``name``, beyond its type; None if nothing."""
    rule = _RULES.get(name)
    return None if rule is None else rule(value)
