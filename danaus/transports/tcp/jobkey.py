"""A multi-host job's key: the secret its controller and its workers share.

A local job makes its keys itself and hands them to its procs through their
stdin. Workers on other machines are started by a job system before any
controller exists, so they are given the job's key by that system instead,
never on a command line (``ps`` shows those): in a file only its owner can
read (``DANAUS_JOB_KEY_FILE``, or ``danaus worker --key-file``), or in the
environment the scheduler sets (``DANAUS_JOB_KEY``). ``danaus key`` makes one.

The key is a CURVE secret key (40 characters of Z85). With it a worker's
listening socket admits only a controller that proves it holds the same key,
and the controller accepts only a worker that proves the same: each side
completes a CurveZMQ handshake only with the other's secret. The key itself
never travels.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

import zmq

from danaus.core.attach import USER_KEY, Key
from danaus.core.settings import Settings, variable
from danaus.transports.tcp.security import JobKeys

KEY_CHARS = 40


def generate() -> str:
    """A new job key (Z85 text)."""
    if not zmq.has("curve"):
        raise RuntimeError("this libzmq was built without CURVE; Danaus needs it to authenticate")
    _, secret = zmq.curve_keypair()
    return secret.decode()


def write(path: str | os.PathLike[str]) -> str:
    """Write a new job key to a new file that only its owner may read; the key."""
    key = generate()
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as out:
        out.write(key + "\n")
    return key


def parse(text: str | bytes) -> JobKeys:
    """The job's keys from a key's text; ``ValueError`` if it is not a job key."""
    raw = text.encode() if isinstance(text, str) else bytes(text)
    secret = raw.strip()
    if len(secret) != KEY_CHARS:
        raise ValueError(
            f"a job key is {KEY_CHARS} characters of Z85 (made by `danaus key`), "
            f"not {len(secret)} characters"
        )
    try:
        public = zmq.curve_public(secret)
    except (ValueError, zmq.ZMQError) as exc:
        raise ValueError(f"not a job key: {exc}") from None
    return JobKeys(public, secret, encrypt=True)


def read(path: str | os.PathLike[str]) -> JobKeys:
    """The job's keys from a key file, which must be the user's and private to them."""
    path = Path(path)
    try:
        info = path.stat()
    except OSError as exc:
        raise ValueError(f"cannot read the job key file {path}: {exc.strerror}") from None
    if not stat.S_ISREG(info.st_mode):
        raise ValueError(f"the job key file {path} is not a regular file")
    if info.st_uid != os.getuid():
        raise PermissionError(f"the job key file {path} belongs to another user")
    if info.st_mode & 0o077:
        raise PermissionError(
            f"the job key file {path} may be read or written by others "
            f"(mode {stat.filemode(info.st_mode)}); make it private: chmod 600 {path}"
        )
    return parse(path.read_bytes())


def user_key_path() -> Path:
    """Where the user's own key is kept: ``$XDG_CONFIG_HOME/danaus/job-key``, else
    ``~/.config/danaus/job-key``."""
    config = os.environ.get("XDG_CONFIG_HOME")
    return (Path(config) if config else Path.home() / ".config") / "danaus" / "job-key"


def user_key() -> JobKeys:
    """The user's own key (`user_key_path`), made now if there is none yet.

    Made in a private file of the same folder and linked into place, so that
    processes that ask at once all read one complete key.
    """
    path = user_key_path()
    if not path.exists():
        # Imported only here: with the module, tempfile (and shutil, bz2 and lzma, which it
        # imports) took about 2.5 ms of CPU of every worker's and fork server's start.
        import tempfile

        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        descriptor, made = tempfile.mkstemp(dir=path.parent, prefix=".job-key-")
        try:
            with os.fdopen(descriptor, "w") as out:
                out.write(generate() + "\n")
            with contextlib.suppress(FileExistsError):  # another process made it first
                os.link(made, path)
        finally:
            os.unlink(made)
    return read(path)


def resolve(key: Key, settings: Settings) -> JobKeys:
    """The job's keys: ``key`` (its text, or a path to its file), else the ``job_key`` or the
    ``job_key_file`` of ``settings``; for `USER_KEY`, those of ``settings``, else the user's own
    (`user_key`)."""
    if isinstance(key, os.PathLike):
        return read(key)
    if key is not None and key is not USER_KEY:
        return parse(key)  # type: ignore[arg-type]
    if settings.job_key is not None:
        return resolve(settings.job_key, settings)
    if settings.job_key_file is not None:
        return read(settings.job_key_file)
    if key is USER_KEY:
        return user_key()
    raise ValueError(
        f"no job key: pass key=, or set {variable('job_key')} (the key) or "
        f"{variable('job_key_file')} (a file holding it); `danaus key --out FILE` makes one"
    )
