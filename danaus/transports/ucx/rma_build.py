"""Where the one-sided RDMA library comes from: ``rma.cpp``, compiled on first use.

The library needs UCX's headers and ``libucp``, which the ``libucx`` wheel (a
dependency of ``ucxx``) ships. A compiled extension built by ``pip install``
would need them at build time, and pip builds in an isolated environment that
has no ``ucxx``; so the library is compiled on first use instead, with the C++
compiler (``$CXX``, else ``g++``), against the UCX of the environment that runs
it, into a cache directory (the ``cache_dir`` setting, ``$DANAUS_CACHE_DIR``; else
``$XDG_CACHE_HOME/danaus``, else ``~/.cache/danaus``). The directory's name
hashes the source, the UCX headers and the machine, so a change of either
builds anew; a file lock lets the processes of a job that start together build
it once. The first process of a job on a fresh machine spends a few seconds
here; the others load the result.

``python -m danaus.transports.ucx.rma_build`` builds it ahead of time (in a
container image, say) and prints where it is.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from danaus.core import config

SOURCE = Path(__file__).with_name("rma.cpp")
LIBRARY = "libdanaus_rma.so"
COMPILE_TIMEOUT = 300.0


class RmaUnavailable(RuntimeError):
    """The one-sided RDMA library cannot be built or loaded here; the message says why."""


def cache_root() -> Path:
    """Where compiled libraries are kept."""
    configured = config.setting("cache_dir")
    if configured:
        return Path(configured)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "danaus"


def ucx_prefix() -> Path:
    """The UCX installation to build against: the ``libucx`` wheel's."""
    try:
        import libucx
    except ImportError as exc:
        raise RmaUnavailable(
            f"UCX's headers and libraries come with the libucx package, which is missing ({exc})"
        ) from exc
    prefix = Path(libucx.__file__).resolve().parent
    if not (prefix / "include" / "ucp" / "api" / "ucp.h").is_file():
        raise RmaUnavailable(f"the libucx package at {prefix} has no UCX headers")
    return prefix


def compiler() -> str:
    name = os.environ.get("CXX", "g++")
    found = shutil.which(name)
    if found is None:
        raise RmaUnavailable(f"no C++ compiler: {name!r} is not on PATH (set CXX to use another)")
    return found


def command(cxx: str, prefix: Path, output: Path) -> list[str]:
    lib = prefix / "lib"
    return [
        cxx,
        "-std=c++17",
        "-O2",
        "-fPIC",
        "-shared",
        "-Wall",
        f"-I{prefix / 'include'}",
        str(SOURCE),
        "-o",
        str(output),
        f"-L{lib}",
        "-lucp",
        "-lucs",
        "-pthread",
        f"-Wl,-rpath,{lib}",
    ]


def fingerprint(cxx: str, prefix: Path) -> str:
    """What the library depends on: its source, the UCX it is built against, the machine."""
    digest = hashlib.sha256()
    digest.update(SOURCE.read_bytes())
    digest.update((prefix / "include" / "ucp" / "api" / "ucp_version.h").read_bytes())
    digest.update(str(prefix).encode())
    digest.update(f"{cxx}|{platform.machine()}|{platform.system()}".encode())
    return digest.hexdigest()[:16]


def library() -> Path:
    """The path of the compiled library, building it first if need be."""
    prefix = ucx_prefix()
    cxx = compiler()
    directory = cache_root() / f"ucx-rma-{fingerprint(cxx, prefix)}"
    target = directory / LIBRARY
    if target.is_file():
        return target
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RmaUnavailable(f"cannot create the cache directory {directory}: {exc}") from exc
    with _locked(directory / "build.lock"):
        if not target.is_file():
            _compile(cxx, prefix, target)
    return target


@contextlib.contextmanager
def _locked(path: Path):
    with open(path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _compile(cxx: str, prefix: Path, target: Path) -> None:
    """Compile into a temporary file, then move it into place: readers never see half a file."""
    handle, scratch = tempfile.mkstemp(dir=target.parent, suffix=".so.tmp")
    os.close(handle)
    try:
        try:
            done = subprocess.run(
                command(cxx, prefix, Path(scratch)),
                capture_output=True,
                text=True,
                timeout=COMPILE_TIMEOUT,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise RmaUnavailable(f"compiling {SOURCE.name} failed: {exc}") from exc
        if done.returncode != 0:
            tail = "\n".join(done.stderr.strip().splitlines()[-15:])
            raise RmaUnavailable(f"compiling {SOURCE.name} with {cxx} failed:\n{tail}")
        os.replace(scratch, target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(scratch)


def main() -> int:
    try:
        print(library())
    except RmaUnavailable as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
