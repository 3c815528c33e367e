"""Job files: how `danaus top` and `danaus debug` find a running job and prove they may see it.

Each controller on a real transport writes one small file while it runs:
the address of its admin socket and the key that socket admits. The file is
the only way to the key: it lives in a directory only its user can enter
(the ``jobs_dir`` setting, ``DANAUS_JOBS_DIR``; else ``$XDG_RUNTIME_DIR/danaus/jobs``, else
``~/.danaus/jobs``; made with mode 0700) and is itself readable by its user
only (0600). A tool refuses a directory or file that others could read or
write, or that another user owns. The controller removes its file when it
shuts down or is ended by SIGTERM or SIGINT (`danaus.admin.signals`). A
controller killed otherwise leaves it behind, so whenever a tool looks for
jobs (`danaus top`, `danaus debug`) it removes the files of controllers on
this host that are gone: no process has the file's pid, or the one that has
it started at another time (the pid was reused).
"""

from __future__ import annotations

import contextlib
import os
import socket
import stat
from pathlib import Path

import msgspec
import psutil

from danaus.core import config


class JobFile(msgspec.Struct, frozen=True):
    """What a tool needs to reach one job's controller."""

    pid: int
    host: str
    address: str
    """The admin socket, ``tcp://host:port``."""
    public_key: str
    secret_key: str
    """The admin socket's CURVE keypair (Z85); the socket admits whoever holds it."""
    started: float
    argv: list[str]
    transport: str
    pid_started: float = 0.0
    """When the controller's process started (psutil's create_time; 0: not recorded)."""


def jobs_dir() -> Path:
    """Where job files live (see the module's docstring)."""
    chosen = config.setting("jobs_dir")
    if chosen:
        return Path(chosen)
    runtime_dir = os.environ.get("XDG_RUNTIME_DIR")
    base = Path(runtime_dir) / "danaus" if runtime_dir else Path.home() / ".danaus"
    return base / "jobs"


def _private_dir(path: Path) -> Path:
    """``path``, made if missing, checked to be ours and closed to others."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    _check_private(path, "directory")
    return path


def _check_private(path: Path, what: str) -> None:
    info = os.lstat(path)
    if info.st_uid != os.getuid():
        raise PermissionError(f"job {what} {path} belongs to another user")
    if stat.S_ISLNK(info.st_mode):
        raise PermissionError(f"job {what} {path} is a symbolic link")
    if info.st_mode & 0o077:
        raise PermissionError(
            f"job {what} {path} is open to other users (mode {stat.S_IMODE(info.st_mode):o}); "
            "it must be readable by its owner only"
        )


def write(job: JobFile) -> Path:
    """Write ``job``'s file (0600, never over an existing file or link); its path."""
    path = _private_dir(jobs_dir()) / f"{job.host}-{job.pid}.job"
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(msgspec.json.encode(job))
    return path


def read(path: Path) -> JobFile:
    """The job in ``path``, once it is checked to be private to this user."""
    _check_private(path, "file")
    try:
        return msgspec.json.decode(path.read_bytes(), type=JobFile)
    except msgspec.MsgspecError as exc:
        raise ValueError(f"{path} is not a Danaus job file: {exc}") from None


def process_started(pid: int) -> float:
    """When process ``pid`` started (seconds since the epoch, as psutil reads it)."""
    return float(psutil.Process(pid).create_time())


def alive(job: JobFile) -> bool:
    """Whether the job's controller still runs (always True for one on another host)."""
    if job.host != socket.gethostname():
        return True
    try:
        started = process_started(job.pid)
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:
        return True
    return not job.pid_started or abs(started - job.pid_started) < 0.01


def running() -> list[tuple[Path, JobFile]]:
    """The jobs whose files are here, newest first; files of dead local controllers are removed."""
    folder = jobs_dir()
    if not folder.is_dir():
        return []
    _check_private(folder, "directory")
    found = []
    for path in folder.glob("*.job"):
        job = read(path)
        if alive(job):
            found.append((path, job))
        else:
            _remove(path)
    return sorted(found, key=lambda item: item[1].started, reverse=True)


def _remove(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


def find(selector: str | None = None) -> JobFile:
    """The job named by ``selector`` (a controller's pid or a job file), else the newest one."""
    if selector is not None and Path(selector).is_file():
        job = read(Path(selector))
        if not alive(job):
            _remove(Path(selector))
            raise LookupError(f"the controller of {selector} (pid {job.pid}) has ended")
        return job
    jobs = running()
    if selector is not None:
        jobs = [(p, j) for p, j in jobs if str(j.pid) == selector]
    if not jobs:
        which = f"with controller pid {selector}" if selector else "running"
        raise LookupError(f"no Danaus job {which} has a job file in {jobs_dir()}")
    return jobs[0][1]
