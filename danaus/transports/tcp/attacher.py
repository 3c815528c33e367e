"""The controller's side of attaching to workers, on its I/O thread.

For each worker it opens a `hostlink` to the worker's address and asks for a
host agent (`Attach`), which the worker starts and which then registers with
the directory like any proc. A worker busy with another controller is asked
again until the deadline; one that cannot be reached, does not hold the job's
key, or whose agent does not register in time is declared lost, with the
reason, so that everything waiting on that host fails instead of hanging.
While ZeroMQ retries a connection that fails (nothing listens there, say), the
controller finds out why with a plain TCP connect and warns at once, then every
`REPORT_INTERVAL` seconds, saying what it waits for and how long is left.
Releasing a host asks its worker to end the agent (`Release`) and waits for
the answer, unless the worker's connection has dropped (the worker is gone, and
its agent with it): then there is nothing left to release, and nobody to wait for.
"""

from __future__ import annotations

import errno
import logging
import os
import socket
import threading
import time
from dataclasses import dataclass, field

import zmq
from zmq.utils.monitor import recv_monitor_message

from danaus.core.transport import ProcLoss
from danaus.transports.tcp import hostlink
from danaus.transports.tcp.bootstrap import Bootstrap
from danaus.transports.tcp.directory import Directory
from danaus.transports.tcp.ioloop import IoLoop, Settle
from danaus.transports.tcp.security import JobKeys

log = logging.getLogger("danaus.attach")

RETRY_INTERVAL = 0.25
"""Seconds between asks of a worker that serves another controller."""

REFUSED = (
    "the worker refused this controller's key, or it is not a Danaus worker "
    "(do both hold the same job key?)"
)
HANDSHAKE_ATTEMPTS = 3
REPORT_INTERVAL = 5.0
"""Seconds between warnings that a worker still cannot be connected to."""
PROBE_TIMEOUT = 1.0
"""Seconds the connect that finds out why a worker cannot be reached may take."""
_EVENTS = (
    zmq.EVENT_HANDSHAKE_SUCCEEDED
    | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
    | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
    | zmq.EVENT_HANDSHAKE_FAILED_AUTH
    | zmq.EVENT_CONNECTED
    | zmq.EVENT_CONNECT_RETRIED
    | zmq.EVENT_DISCONNECTED
)


@dataclass
class _Link:
    agent: str
    address: str
    socket: zmq.Socket
    monitor: zmq.Socket
    attach: hostlink.Attach
    deadline: float
    host: str | None = None
    """The worker's name for its host, once it has accepted."""
    accepted: bool = False
    failed_handshakes: int = 0
    """How many handshakes with the worker have failed in a row (ZeroMQ tries again)."""
    dropped: bool = False
    """The connection to the worker dropped after a handshake, and has not come back."""
    releases: list[Settle] = field(default_factory=list)
    unreachable: str | None = None
    """Why the last connection to the worker failed, while it cannot be reached."""
    next_report: float = 0.0
    """When to find out (and say) again why the worker cannot be reached."""


class Attacher:
    """The links from this controller to the workers it attached (I/O thread only)."""

    def __init__(self, context: zmq.Context, io: IoLoop, directory: Directory) -> None:
        self._context = context
        self._io = io
        self._directory = directory
        self._links: dict[str, _Link] = {}

    def attached(self) -> list[str]:
        """The host agents attached (or being attached) and not released."""
        return list(self._links)

    def attach(
        self, agent: str, ip: str, port: int, keys: JobKeys, boot: Bootstrap, timeout: float
    ) -> None:
        """Ask the worker at ``ip:port`` to start host agent ``agent`` for this controller."""
        address = hostlink.endpoint(ip, port)
        if any(link.address == address for link in self._links.values()):
            why = "could not be attached: this controller is already"
            self._directory.lost(ProcLoss(agent, why, host=address))
            return
        sock = hostlink.connect(self._context, keys, ip, port)
        monitor = sock.get_monitor_socket(_EVENTS)
        token = f"{agent}@{os.getpid()}:{os.urandom(8).hex()}"
        link = _Link(
            agent, address, sock, monitor, hostlink.Attach(token, boot), time.monotonic() + timeout
        )
        self._links[agent] = link
        self._io.add_reader(sock, lambda: self._readable(link))
        self._io.add_reader(monitor, lambda: self._monitored(link, ip, port))
        self._send(link, link.attach)
        self._io.call_later(timeout, lambda: self._check_registered(link, timeout))

    def _send(self, link: _Link, message: hostlink.ToWorker) -> None:
        link.socket.send(hostlink.encode(message), zmq.NOBLOCK)

    def _readable(self, link: _Link) -> None:
        while self._links.get(link.agent) is link:
            try:
                frame = link.socket.recv(zmq.NOBLOCK)
            except zmq.Again:
                return
            try:
                answer = hostlink.decode_to_controller(frame)
            except ValueError as exc:
                log.error("attach: worker at %s: %s", link.address, exc)
                continue
            if answer.token != link.attach.token:
                continue
            if isinstance(answer, hostlink.Attached):
                link.accepted, link.host = True, answer.host
            elif isinstance(answer, hostlink.Busy):
                self._busy(link, answer.reason)
            elif isinstance(answer, hostlink.Ended):
                self._ended(link, answer.code)
            else:
                self._released(link)

    def _busy(self, link: _Link, reason: str) -> None:
        if time.monotonic() + RETRY_INTERVAL >= link.deadline:
            self._give_up(link, f"the worker was busy until the deadline: {reason}")
        else:
            self._io.call_later(RETRY_INTERVAL, lambda: self._retry(link))

    def _retry(self, link: _Link) -> None:
        if self._links.get(link.agent) is link and not link.accepted:
            self._send(link, link.attach)

    def _monitored(self, link: _Link, ip: str, port: int) -> None:
        """What ZeroMQ saw of the connection to the worker.

        A connect that failed is retried (and reported). A worker with another key
        cuts every handshake short, as a busy or restarting one may cut one: the
        attach ends after `HANDSHAKE_ATTEMPTS` failures in a row. A connection that
        drops while a release waits ends the wait: the worker is gone (ZeroMQ would
        reconnect to a new one at that address, which knows nothing of this
        controller).
        """
        while self._links.get(link.agent) is link:
            try:
                event = recv_monitor_message(link.monitor, zmq.NOBLOCK)
            except zmq.Again:
                return
            kind = event["event"]
            if kind == zmq.EVENT_CONNECTED:
                link.unreachable = None
                continue
            if kind == zmq.EVENT_CONNECT_RETRIED:
                self._connect_failed(link, ip, port)
                continue
            if kind == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                link.failed_handshakes, link.dropped = 0, False
                continue
            if kind == zmq.EVENT_DISCONNECTED:
                link.dropped = True
                if link.releases:
                    self._worker_gone(link)
                continue
            link.failed_handshakes += 1
            if link.failed_handshakes >= HANDSHAKE_ATTEMPTS:
                self._give_up(link, REFUSED)
            else:
                log.warning("attach: worker at %s: a handshake failed; trying again", link.address)

    def _connect_failed(self, link: _Link, ip: str, port: int) -> None:
        """ZeroMQ retries a connection to the worker that failed: find out why (off this
        thread, which serves every proc's sockets), unless that was done lately."""
        now = time.monotonic()
        if link.accepted or now < link.next_report:
            return
        link.next_report = now + REPORT_INTERVAL

        def probe() -> None:
            why = _connect_error(ip, port)
            self._io.call_soon(self._report_unreachable, link, why)

        threading.Thread(target=probe, name=f"danaus-probe-{link.agent}", daemon=True).start()

    def _report_unreachable(self, link: _Link, why: str | None) -> None:
        if self._links.get(link.agent) is not link or link.accepted or why is None:
            return
        link.unreachable = why
        left = max(link.deadline - time.monotonic(), 0.0)
        log.warning(
            "attach: worker at %s: %s; retrying until a worker listens there "
            "(%.0f s left of the attach timeout)",
            link.address,
            why,
            left,
        )

    def _check_registered(self, link: _Link, timeout: float) -> None:
        if self._links.get(link.agent) is not link or self._directory.known(link.agent):
            return
        if link.accepted:
            why = "its host agent did not register"
        elif link.unreachable is not None:
            why = f"could not connect ({link.unreachable}: is a worker running there?)"
        else:
            why = "no answer from the worker (is it running there, and on that address?)"
        self._give_up(link, f"{why} within {timeout:g} s")

    def _ended(self, link: _Link, code: int) -> None:
        """The worker saw its host agent end: the host is lost now, not a heartbeat later."""
        self._directory.lost(
            ProcLoss(
                link.agent,
                "exited" if code >= 0 else "was killed",
                host=link.host or link.address,
                exit_code=code if code >= 0 else None,
                signal=-code if code < 0 else None,
            )
        )

    def _give_up(self, link: _Link, why: str) -> None:
        """The host cannot be used: it is lost, and so is everything waiting on it (which
        reports ``why``; the log does not say it again where people read it)."""
        if self._links.get(link.agent) is not link:
            return
        log.info("attach: worker at %s: %s", link.address, why)
        self._close(link)
        loss = ProcLoss(link.agent, f"could not be attached: {why}", host=link.address)
        self._directory.lost(loss)

    def release(self, agent: str, final: bool, settle: Settle) -> None:
        """Ask the worker of ``agent`` to end it (and exit, if ``final``); ``settle`` when done."""
        link = self._links.get(agent)
        if link is None:
            settle(None)
            return
        link.releases.append(settle)
        self._directory.lost(
            ProcLoss(agent, "was released by its controller", host=link.host or link.address)
        )
        if link.dropped:
            self._worker_gone(link)
            return
        self._send(link, hostlink.Release(link.attach.token, final))

    def _worker_gone(self, link: _Link) -> None:
        log.info("attach: the worker at %s is gone: nothing to release there", link.address)
        self._released(link)

    def _released(self, link: _Link) -> None:
        self._close(link)
        for settle in link.releases:
            settle(None)

    def forget(self, agent: str) -> None:
        """Stop waiting for ``agent``'s worker (it did not answer a release in time)."""
        link = self._links.get(agent)
        if link is not None:
            self._released(link)

    def _close(self, link: _Link) -> None:
        if self._links.get(link.agent) is link:
            del self._links[link.agent]
        for sock in (link.socket, link.monitor):
            self._io.remove_reader(sock)
            sock.close(0)


def _connect_error(ip: str, port: int) -> str | None:
    """Why a TCP connection to ``ip:port`` fails ("Connection refused"), or None if it opens."""
    try:
        with socket.create_connection((ip, port), timeout=PROBE_TIMEOUT):
            return None
    except TimeoutError:
        return f"no answer to a connection within {PROBE_TIMEOUT:g} s"
    except OSError as exc:
        return exc.strerror or os.strerror(exc.errno or errno.EIO)
