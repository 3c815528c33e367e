"""The admin socket: where `danaus top` and `danaus debug` reach a job's controller.

A ROUTER of its own, in a zmq context of its own (so with a ZAP handler of its
own), that admits only clients holding a CURVE keypair made for it alone: not
the job's key, so a tool can ask the controller what the admin protocol
offers (`danaus.admin.protocol`, msgpack, never pickles) and cannot pass for a
member of the job. The keypair reaches tools through the job file
(`danaus.admin.jobfile`), readable by the job's user only. The socket listens
on loopback unless ``admin_host`` says otherwise, traffic is encrypted, and
refused handshakes are logged like those of the job's own sockets. The file
goes when the controller shuts down, or is ended by SIGTERM or SIGINT
(`danaus.admin.signals`).

Requests arrive on the I/O thread, are answered on the runtime loop
(`danaus.admin.service`) and the answers go back from the I/O thread. Each
message is ``[request id, body]`` from a DEALER.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import itertools
import logging
import os
import socket
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import zmq

from danaus.admin import jobfile, protocol
from danaus.admin.signals import RemoveOnSignal
from danaus.core.settings import Limits
from danaus.transports.tcp.handshakes import HandshakeMonitor
from danaus.transports.tcp.ioloop import IoLoop
from danaus.transports.tcp.refusals import RefusalLog
from danaus.transports.tcp.security import JobKeys, ZapHandler
from danaus.transports.tcp.sockets import bind_router

if TYPE_CHECKING:
    from danaus.admin.service import AdminService

log = logging.getLogger("danaus.admin")

ANSWER_BYTES = 256 * 2**20
"""The largest answer a tool accepts (a snapshot of a very large job is a few MiB)."""


class AdminSocket:
    """The controller's admin ROUTER, served on its I/O thread (``io``); answered on ``loop``
    once it serves an `AdminService`."""

    def __init__(
        self,
        *,
        io: IoLoop,
        loop: asyncio.AbstractEventLoop,
        bind_host: str,
        limits: Limits,
        refusals: RefusalLog,
        proc_id: str,
        transport: str,
    ) -> None:
        """Bind (call before the I/O thread starts: the ZAP handler registers with it)."""
        self._io = io
        self._loop = loop
        self._transport = transport
        self.keys = JobKeys.generate()
        self._context = zmq.Context()
        self._zap = ZapHandler(self._context, io, self.keys)
        self._router = bind_router(self._context, self.keys, bind_host, limits)
        self.address = self._router.last_endpoint.decode()
        self._monitor = HandshakeMonitor(
            self._router, io, refusals, f"the admin socket of {proc_id}"
        )
        self._service: AdminService | None = None
        """What answers the requests; None while the controller starts."""
        self.job_file: Path | None = None
        self._on_signal: RemoveOnSignal | None = None
        io.add_reader(self._router, self._readable)

    def serve(self, service: AdminService) -> None:
        """Answer requests with ``service`` from now on, and write the job file, so that tools
        on this host find the job."""
        self._service = service
        job = jobfile.JobFile(
            pid=os.getpid(),
            pid_started=jobfile.process_started(os.getpid()),
            host=socket.gethostname(),
            address=self.address,
            public_key=self.keys.public.decode(),
            secret_key=self.keys.secret.decode(),
            started=time.time(),
            argv=list(sys.argv),
            transport=self._transport,
        )
        try:
            self.job_file = jobfile.write(job)
        except OSError as exc:
            log.warning("danaus top and danaus debug cannot find this job: %s", exc)
        else:
            self._on_signal = RemoveOnSignal(self.job_file)

    def close(self) -> None:
        """Remove the job file and close the socket (from any thread)."""
        if self._on_signal is not None:
            self._on_signal.uninstall()
            self._on_signal = None
        if self.job_file is not None:
            with contextlib.suppress(FileNotFoundError):
                self.job_file.unlink()
            self.job_file = None
        self._io.call_soon(self._close)

    def _close(self) -> None:
        self._monitor.close()
        self._io.remove_reader(self._router)
        self._router.close(0)
        self._context.destroy(linger=0)

    # The methods below run on the I/O thread.

    def _readable(self) -> None:
        while True:
            try:
                message = self._router.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            if len(message) != 3:
                log.error("admin socket: rejected a message of %d frames", len(message))
                continue
            client, request_id, body = message
            try:
                request = protocol.decode_request(body)
            except ValueError as exc:
                log.error("admin socket: %s", exc)
                self._send(client, request_id, protocol.Refused(str(exc)))
                continue
            service = self._service
            if service is None:
                self._send(client, request_id, protocol.Refused("the controller is starting"))
                continue
            answer = asyncio.run_coroutine_threadsafe(service.answer(request), self._loop)
            answer.add_done_callback(functools.partial(self._answered, client, request_id))

    def _answered(
        self, client: bytes, request_id: bytes, done: concurrent.futures.Future[protocol.Answer]
    ) -> None:
        self._io.call_soon(self._reply, client, request_id, done)

    def _reply(
        self, client: bytes, request_id: bytes, done: concurrent.futures.Future[protocol.Answer]
    ) -> None:
        try:
            answer = done.result()
        except BaseException as exc:
            log.exception("admin request failed")
            answer = protocol.Refused(f"the controller failed to answer: {exc!r}")
        self._send(client, request_id, answer)

    def _send(self, client: bytes, request_id: bytes, answer: protocol.Answer) -> None:
        with contextlib.suppress(zmq.ZMQError):
            self._router.send_multipart([client, request_id, protocol.encode(answer)])


class AdminClient:
    """A tool's connection to a job's admin socket: one request at a time."""

    def __init__(self, job: jobfile.JobFile) -> None:
        keys = JobKeys(job.public_key.encode(), job.secret_key.encode())
        self._context = zmq.Context()
        self._socket = self._context.socket(zmq.DEALER)
        keys.connect_as_client(self._socket)
        self._socket.maxmsgsize = ANSWER_BYTES
        self._socket.linger = 0
        self._socket.connect(job.address)
        self._ids = itertools.count(1)
        self.job = job

    def ask(self, request: protocol.Request, timeout: float | None = None) -> protocol.Answer:
        """Send ``request`` and wait for its answer (``TimeoutError`` after ``timeout`` s).

        Raises `ConnectionError` when the job's controller has ended meanwhile.
        """
        request_id = str(next(self._ids)).encode()
        self._socket.send_multipart([request_id, protocol.encode(request)])
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            wait = 100 if deadline is None else max(0, int((deadline - time.monotonic()) * 1000))
            if self._socket.poll(min(wait, 100)):
                reply = self._socket.recv_multipart()
                if len(reply) == 2 and reply[0] == request_id:
                    return protocol.decode_answer(reply[1])
            elif deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(
                    f"the job of pid {self.job.pid} did not answer within {timeout} s"
                )
            elif not jobfile.alive(self.job):
                raise ConnectionError(f"the job of pid {self.job.pid} has ended")

    def close(self) -> None:
        self._socket.close(0)
        self._context.destroy(linger=0)

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
