"""A worker loop: the process a job system starts on each host, waiting for a controller.

It listens on one address of the host with a `hostlink` socket that admits
only holders of the job's key (refusals are logged, rate-limited, like every
proc's). When a controller attaches, it starts a host agent for it: a process
of its own (``python -m danaus.transports.tcp.worker``, given its bootstrap on
stdin), in a process group of its own, which registers with the controller's
directory and starts that controller's procs on this host. One controller at a
time: another is told the worker is busy. The next host agent's process is
started ahead of time, while the worker waits, so that it has done its
imports when a controller attaches.

When the host agent ends (its controller released it, or went silent and the
agent gave up on it, or it was killed), the worker kills whatever is left in
the agent's process group, so nothing the controller started outlives it, and
waits for the next controller, or exits (``exit_on_disconnect``, or a final
release). A signal that ends the worker ends its host agent first.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import msgspec
import zmq

from danaus.transports.tcp import hostlink
from danaus.transports.tcp.handshakes import HandshakeMonitor
from danaus.transports.tcp.ioloop import IoLoop
from danaus.transports.tcp.launcher import default_argv
from danaus.transports.tcp.refusals import RefusalLog
from danaus.transports.tcp.security import JobKeys, ZapHandler
from danaus.transports.tcp.worker import PRELOADABLE

log = logging.getLogger("danaus.worker")


@dataclass
class _Agent:
    """The host agent started for the attached controller."""

    token: str
    identity: bytes
    """The controller's link, to answer it."""
    popen: subprocess.Popen[bytes]
    pidfd: int
    final: bool = False
    releasing: bool = False


class WorkerLoop:
    """One host's worker: waits for a controller, starts its host agent, cleans up after it."""

    def __init__(
        self,
        ip: str,
        port: int,
        keys: JobKeys,
        *,
        name: str,
        exit_on_disconnect: bool = False,
    ) -> None:
        self.name = name
        self.ip = ip
        self._exit_on_disconnect = exit_on_disconnect
        self._io = IoLoop(f"danaus-worker-{name}")
        self._context = zmq.Context()
        self._zap = ZapHandler(self._context, self._io, keys)
        self._router = hostlink.listen(self._context, keys, ip, port)
        self.address = self._router.last_endpoint.decode()
        self._monitor = HandshakeMonitor(
            self._router, self._io, RefusalLog(self._io.call_later_threadsafe), f"worker {name}"
        )
        self._agent: _Agent | None = None
        self._spare: subprocess.Popen[bytes] | None = None
        """The next host agent's process, started ahead of time (waiting for its bootstrap)."""
        self._transport = "tcp"
        """The transport the last controller used: the spare imports it ahead of time."""
        self._imports: str | None = None
        """The last job's preloads and ``sys.path`` (JSON), if it had preloads: the spare's
        fork server imports them ahead of time."""
        self._done = threading.Event()
        self._stopped = False
        self._io.add_reader(self._router, self._readable)
        self._io.call_soon(self._start_spare)

    def run(self) -> None:
        """Serve until told to exit (a final release, a signal, or ``exit_on_disconnect``)."""
        self._io.start()
        try:
            while not self._done.wait(0.5):
                pass
        finally:
            self.stop()

    def request_exit(self) -> None:
        """Stop serving soon (from any thread, or a signal handler)."""
        self._done.set()

    def stop(self) -> None:
        """End the host agent (if any) and stop serving. Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        ended = threading.Event()

        def end() -> None:
            if self._agent is not None:
                self._kill_group(self._agent.popen)
            if self._spare is not None:
                self._kill_group(self._spare)
            ended.set()

        self._io.call_soon(end)
        ended.wait(5)
        self._io.stop()
        self._monitor.close()
        self._context.destroy(linger=1000)
        self._done.set()

    # The methods below run on the I/O thread.

    def _readable(self) -> None:
        while True:
            try:
                identity, frame = self._router.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            except ValueError:
                log.error("worker %s: a message of the wrong shape; ignored", self.name)
                continue
            try:
                message = hostlink.decode_to_worker(frame)
            except ValueError as exc:
                log.error("worker %s: %s", self.name, exc)
                continue
            if isinstance(message, hostlink.Attach):
                self._attach(identity, message)
            else:
                self._release(identity, message)

    def _answer(self, identity: bytes, message: hostlink.ToController) -> None:
        self._router.send_multipart([identity, hostlink.encode(message)], zmq.NOBLOCK)

    def _attach(self, identity: bytes, attach: hostlink.Attach) -> None:
        agent = self._agent
        if agent is not None:
            if agent.token == attach.token:
                self._answer(identity, hostlink.Attached(attach.token, self.name, agent.popen.pid))
            else:
                reason = f"it serves another controller (host agent pid {agent.popen.pid})"
                self._answer(identity, hostlink.Busy(attach.token, reason))
            return
        if attach.boot.transport not in PRELOADABLE:
            reason = f"no transport {attach.boot.transport!r} here"
            self._answer(identity, hostlink.Busy(attach.token, reason))
            return
        boot = msgspec.structs.replace(
            attach.boot, host=self.name, bind_host=self.ip, parent_pid=os.getpid()
        )
        self._transport = boot.transport
        self._imports = (
            json.dumps({"preload": boot.options.preload, "sys_path": boot.sys_path})
            if boot.options.preload
            else None
        )
        try:
            popen = self._take_spare() or self._start()
            assert popen.stdin is not None
            popen.stdin.write(boot.encode())
            popen.stdin.close()
        except OSError as exc:
            log.error("worker %s: could not start a host agent: %s", self.name, exc)
            self._answer(identity, hostlink.Busy(attach.token, f"could not start: {exc}"))
            return
        agent = _Agent(attach.token, identity, popen, os.pidfd_open(popen.pid))
        self._agent = agent
        self._io.add_reader(agent.pidfd, lambda: self._agent_ended(agent))
        log.info(
            "worker %s: controller %s attached (host agent %s, pid %d)",
            self.name,
            boot.controller,
            boot.proc_id,
            popen.pid,
        )
        self._answer(identity, hostlink.Attached(attach.token, self.name, popen.pid))

    def _release(self, identity: bytes, release: hostlink.Release) -> None:
        agent = self._agent
        if agent is None or agent.token != release.token:
            self._answer(identity, hostlink.Released(release.token))
            if release.final:
                self._done.set()
            return
        agent.identity = identity
        agent.final = agent.final or release.final
        agent.releasing = True
        self._kill_agent(agent)

    def _start(self) -> subprocess.Popen[bytes]:
        """A host agent's process, importing what it needs while it waits for its bootstrap."""
        return subprocess.Popen(
            [*default_argv(), "--preload", self._transport, *filter(None, [self._imports])],
            stdin=subprocess.PIPE,
            close_fds=True,
            start_new_session=True,
        )

    def _start_spare(self) -> None:
        try:
            self._spare = self._start()
        except OSError as exc:
            log.warning("worker %s: could not start a host agent ahead of time: %s", self.name, exc)

    def _take_spare(self) -> subprocess.Popen[bytes] | None:
        spare, self._spare = self._spare, None
        if spare is not None and spare.poll() is not None:
            return None
        return spare

    def _kill_agent(self, agent: _Agent) -> None:
        self._kill_group(agent.popen)

    @staticmethod
    def _kill_group(popen: subprocess.Popen[bytes]) -> None:
        """End a host agent and everything in its process group."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(popen.pid, signal.SIGKILL)

    def _agent_ended(self, agent: _Agent) -> None:
        self._io.remove_reader(agent.pidfd)
        os.close(agent.pidfd)
        self._kill_agent(agent)  # before reaping it, while its group id cannot be reused
        code = agent.popen.wait()
        self._agent = None
        how = f"exit code {code}" if code >= 0 else f"signal {-code}"
        log.info("worker %s: host agent %d ended (%s)", self.name, agent.popen.pid, how)
        if agent.releasing:
            self._answer(agent.identity, hostlink.Released(agent.token))
        else:
            self._answer(agent.identity, hostlink.Ended(agent.token, code))
        if agent.final or self._exit_on_disconnect:
            self._done.set()
        elif self._spare is None:
            self._start_spare()


def run_worker_loop(
    ip: str,
    port: int,
    keys: JobKeys,
    *,
    name: str,
    exit_on_disconnect: bool = False,
    address_file: Path | None = None,
) -> None:
    """Run a worker loop in this process until it is told to exit, or a signal ends it.

    Prints one line when it listens (``danaus worker NAME listening on ADDRESS``),
    and writes ADDRESS to ``address_file`` if given (whole, or not at all: a job
    system waits for the file to know the worker is up, and where).
    """
    worker = WorkerLoop(ip, port, keys, name=name, exit_on_disconnect=exit_on_disconnect)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: worker.request_exit())
    if address_file is not None:
        partial = address_file.with_name(address_file.name + ".partial")
        partial.write_text(worker.address + "\n")
        partial.replace(address_file)
    print(f"danaus worker {name} listening on {worker.address}", flush=True)
    sys.stdout.flush()
    worker.run()
