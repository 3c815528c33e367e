"""Authentication: every connection of a job proves it holds the job's CURVE key.

The controller makes one CURVE keypair per job and hands it to each worker
through the worker's stdin, never on a command line. Every proc's receiving
socket is a CURVE server whose ZAP handler admits only clients presenting the
job's public key, which completing the handshake proves they hold the secret
for. A peer without the key never gets a frame through, so nothing from it is
ever unpickled.

CURVE also encrypts, and encryption caps bulk transfers (about 280 MB/s per
connection on a small machine, against 1.7 GB/s without). With
``encrypt=False`` connections authenticate with ZeroMQ's PLAIN mechanism
instead, with a password derived from the job's secret (the secret itself,
which also keys the ucx challenge, never crosses the wire), checked by the same
ZAP handler, and data travels in clear. Whoever reads the traffic can read the
password and join the job, so ``encrypt=False`` is refused unless the job
listens on loopback only, which no one but the host's root can read.

Refused handshakes are logged by `danaus.transports.tcp.handshakes`, which
sees every kind of refusal; the ZAP handler sees only some of them.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass

import zmq
from zmq.utils import z85

from danaus.transports.tcp.ioloop import IoLoop

ZAP_ENDPOINT = "inproc://zeromq.zap.01"
ZAP_DOMAIN = "danaus"


@dataclass(frozen=True)
class JobKeys:
    """The job's CURVE keypair, Z85-encoded, and whether connections encrypt."""

    public: bytes
    secret: bytes
    encrypt: bool = True

    @classmethod
    def generate(cls, encrypt: bool = True) -> JobKeys:
        if not zmq.has("curve"):
            raise RuntimeError(
                "this libzmq was built without CURVE; Danaus needs it to authenticate"
            )
        public, secret = zmq.curve_keypair()
        return cls(public, secret, encrypt)

    @property
    def password(self) -> bytes:
        """The PLAIN password of an unencrypted job: derived from the secret, never the secret."""
        return (
            hmac.new(self.secret, b"danaus zmq plain password", hashlib.sha256).hexdigest().encode()
        )

    def serve(self, socket: zmq.Socket) -> None:
        """Make ``socket`` accept only clients holding this job's key."""
        if self.encrypt:
            socket.curve_server = True
            socket.curve_publickey = self.public
            socket.curve_secretkey = self.secret
        else:
            socket.plain_server = True
        socket.zap_domain = ZAP_DOMAIN.encode()

    def connect_as_client(self, socket: zmq.Socket) -> None:
        """Make ``socket`` present this job's key to servers of this job."""
        if self.encrypt:
            socket.curve_serverkey = self.public
            socket.curve_publickey = self.public
            socket.curve_secretkey = self.secret
        else:
            socket.plain_username = ZAP_DOMAIN.encode()
            socket.plain_password = self.password


class ZapHandler:
    """Answers the process's ZAP requests (RFC 27) on the I/O thread."""

    def __init__(self, context: zmq.Context, io: IoLoop, keys: JobKeys) -> None:
        self._allowed = z85.decode(keys.public)
        self._password = keys.password
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
        version, request_id, domain, _address, _identity, mechanism = request[:6]
        credentials = request[6:]
        curve = mechanism == b"CURVE" and len(credentials) == 1
        plain = mechanism == b"PLAIN" and len(credentials) == 2
        allowed = (
            version == b"1.0"
            and domain == ZAP_DOMAIN.encode()
            and (
                (curve and credentials[0] == self._allowed)
                or (plain and hmac.compare_digest(credentials[1], self._password))
            )
        )
        if allowed:
            return [b"1.0", request_id, b"200", b"OK", b"danaus", b""]
        return [b"1.0", request_id, b"400", b"not a member of this job", b"", b""]
