"""Authentication: every connection of a job proves it holds the job's CURVE key.

The controller makes one CURVE keypair per job and hands it to each worker
through the worker's stdin, never on a command line. Every proc's receiving
socket is a CURVE server whose ZAP handler admits only clients presenting the
job's public key, which completing the handshake proves they hold the secret
for. A peer without the key never gets a frame through, so nothing from it is
ever unpickled.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import zmq
from zmq.utils import z85

from danaus.transports.tcp.ioloop import IoLoop

log = logging.getLogger("danaus.security")

ZAP_ENDPOINT = "inproc://zeromq.zap.01"
ZAP_DOMAIN = "danaus"


@dataclass(frozen=True)
class JobKeys:
    """The job's CURVE keypair, Z85-encoded."""

    public: bytes
    secret: bytes

    @classmethod
    def generate(cls) -> JobKeys:
        if not zmq.has("curve"):
            raise RuntimeError(
                "this libzmq was built without CURVE; Danaus needs it to authenticate"
            )
        public, secret = zmq.curve_keypair()
        return cls(public, secret)

    def serve(self, socket: zmq.Socket) -> None:
        """Make ``socket`` accept only clients holding this job's key."""
        socket.curve_server = True
        socket.curve_publickey = self.public
        socket.curve_secretkey = self.secret
        socket.zap_domain = ZAP_DOMAIN.encode()

    def connect_as_client(self, socket: zmq.Socket) -> None:
        """Make ``socket`` present this job's key to servers of this job."""
        socket.curve_serverkey = self.public
        socket.curve_publickey = self.public
        socket.curve_secretkey = self.secret


class ZapHandler:
    """Answers the process's ZAP requests (RFC 27) on the I/O thread."""

    def __init__(self, context: zmq.Context, io: IoLoop, keys: JobKeys) -> None:
        self._allowed = z85.decode(keys.public)
        self._socket = context.socket(zmq.REP)
        self._socket.linger = 0
        self._socket.bind(ZAP_ENDPOINT)
        io.add_reader(self._socket, self._handle)

    def _handle(self) -> None:
        while True:
            try:
                request = self._socket.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            self._socket.send_multipart(self._answer(request))

    def _answer(self, request: list[bytes]) -> list[bytes]:
        if len(request) < 6:
            request_id = request[1] if len(request) > 1 else b""
            return [b"1.0", request_id, b"400", b"malformed ZAP request", b"", b""]
        version, request_id, domain, address, _identity, mechanism = request[:6]
        credentials = request[6:]
        allowed = (
            version == b"1.0"
            and domain == ZAP_DOMAIN.encode()
            and mechanism == b"CURVE"
            and len(credentials) == 1
            and credentials[0] == self._allowed
        )
        if allowed:
            return [b"1.0", request_id, b"200", b"OK", b"danaus", b""]
        log.warning(
            "refused a connection from %s: not authenticated for this job",
            address.decode(errors="replace"),
        )
        return [b"1.0", request_id, b"400", b"not a member of this job", b"", b""]

    def close(self) -> None:
        self._socket.close(0)
