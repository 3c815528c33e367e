"""The Python stacks of a proc's threads, taken while it runs: a dump, or samples (flame graphs).

Both run on the proc itself (through ``ProcAgent.probe``) and read the
interpreter's own frames (``sys._current_frames``): nothing is stopped, no
debugger attaches, and it works on every host the job runs on, as the job's
user, whatever the kernel's ptrace policy. Taking them needs the GIL only
briefly: a thread spinning in Python gives it up every few milliseconds
(``sys.getswitchinterval``), so a dump of a busy proc comes back in
milliseconds. Frames of native code (C extensions) are not seen; a thread
that holds the GIL in native code for long delays the dump that long.
"""

from __future__ import annotations

import asyncio
import linecache
import os
import sys
import threading
import time
from collections import Counter
from types import CodeType, FrameType
from typing import TYPE_CHECKING

from danaus.admin.views import FrameView, ProfileView, StacksView, ThreadView

if TYPE_CHECKING:
    from danaus.core.runtime import Runtime

MAX_SECONDS = 30.0
"""The longest a profile may sample."""
MAX_HZ = 1000


def _function(code: CodeType) -> str:
    return getattr(code, "co_qualname", code.co_name)


def _frames(frame: FrameType | None) -> list[FrameType]:
    """The frames from ``frame`` outwards, the outermost first."""
    chain = []
    while frame is not None:
        chain.append(frame)
        frame = frame.f_back
    chain.reverse()
    return chain


def _thread_names() -> dict[int, threading.Thread]:
    return {t.ident: t for t in threading.enumerate() if t.ident is not None}


def thread_stacks(runtime: Runtime) -> StacksView:
    """Every thread of this process and its stack now (a probe: ``runtime`` names the proc).

    The thread answering (the runtime's loop) is shown too, without this
    function's own frame.
    """
    started = time.perf_counter()
    current = threading.get_ident()
    known = _thread_names()
    threads = []
    for ident, top in sys._current_frames().items():
        frames = _frames(top)
        if ident == current:
            frames = frames[:-1]
        thread = known.get(ident)
        threads.append(
            ThreadView(
                ident=ident,
                name=thread.name if thread is not None else f"thread {ident}",
                daemon=thread.daemon if thread is not None else True,
                frames=[
                    FrameView(
                        function=_function(f.f_code),
                        file=f.f_code.co_filename,
                        line=f.f_lineno or 0,
                        code=linecache.getline(f.f_code.co_filename, f.f_lineno or 0).strip(),
                    )
                    for f in frames
                ],
            )
        )
    threads.sort(key=lambda t: (t.ident != threading.main_thread().ident, t.name))
    return StacksView(
        proc=runtime.proc_id,
        pid=os.getpid(),
        threads=threads,
        taken_seconds=time.perf_counter() - started,
    )


class _Sampler:
    """Counts the folded stacks of this process's threads, ``hz`` times a second, on a thread."""

    def __init__(self, seconds: float, hz: float) -> None:
        self.seconds = seconds
        self.interval = 1.0 / hz
        self.stacks: Counter[str] = Counter()
        self.samples = 0
        self._labels: dict[CodeType, str] = {}

    def _label(self, code: CodeType) -> str:
        label = self._labels.get(code)
        if label is None:
            where = f"{os.path.basename(code.co_filename)}:{code.co_firstlineno}"
            label = self._labels[code] = f"{_function(code)} ({where})".replace(";", ",")
        return label

    def run(self) -> None:
        me = threading.get_ident()
        deadline = time.monotonic() + self.seconds
        next_at = time.monotonic()
        while next_at < deadline:
            names = _thread_names()
            for ident, top in sys._current_frames().items():
                if ident == me:
                    continue
                thread = names.get(ident)
                name = (thread.name if thread is not None else f"thread {ident}").replace(";", ",")
                frames = ";".join(self._label(f.f_code) for f in _frames(top))
                self.stacks[f"{name};{frames}" if frames else name] += 1
            self.samples += 1
            next_at += self.interval
            time.sleep(max(0.0, next_at - time.monotonic()))


def check_profile(seconds: float, hz: float) -> None:
    """Raise `ValueError` unless a profile of ``seconds`` at ``hz`` is within bounds."""
    if not 0 < seconds <= MAX_SECONDS:
        raise ValueError(f"a profile samples for 0 to {MAX_SECONDS:.0f} s, not {seconds}")
    if not 1 <= hz <= MAX_HZ:
        raise ValueError(f"a profile samples 1 to {MAX_HZ} times a second, not {hz}")


async def profile(runtime: Runtime, seconds: float, hz: float) -> ProfileView:
    """Sample this process's stacks for ``seconds`` at ``hz`` (a probe; see `ProfileView`).

    The samples are taken on a thread of their own, so the runtime's loop goes
    on serving the proc meanwhile.
    """
    check_profile(seconds, hz)
    sampler = _Sampler(seconds, hz)
    loop = asyncio.get_running_loop()
    done = loop.create_future()

    def run() -> None:
        try:
            sampler.run()
        finally:
            loop.call_soon_threadsafe(done.set_result, None)

    threading.Thread(target=run, name="danaus-profile", daemon=True).start()
    await done
    return ProfileView(
        proc=runtime.proc_id,
        pid=os.getpid(),
        seconds=seconds,
        interval=sampler.interval,
        samples=sampler.samples,
        stacks=dict(sampler.stacks),
    )


def format_stacks(view: StacksView) -> str:
    """``view`` as text, like a Python traceback per thread (the innermost frame last)."""
    lines = [
        f"proc {view.proc} (pid {view.pid}): {len(view.threads)} threads, "
        f"taken in {view.taken_seconds * 1000:.1f} ms"
    ]
    for thread in view.threads:
        lines.append("")
        daemon = ", daemon" if thread.daemon else ""
        lines.append(f'thread "{thread.name}" ({thread.ident}{daemon})')
        for frame in thread.frames:
            lines.append(f'  File "{frame.file}", line {frame.line}, in {frame.function}')
            if frame.code:
                lines.append(f"    {frame.code}")
    return "\n".join(lines)
