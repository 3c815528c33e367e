"""The link between a controller and a worker loop: addresses, sockets and the messages on it.

A worker loop listens on one address with a ZeroMQ ROUTER that is a CURVE
server keyed with the job's key; a controller connects a DEALER that is a
CURVE client keyed with the same key. Each side completes the handshake only
if the other holds the key, so nothing reaches either from anyone else, and
what travels is encrypted. What travels is small: the controller asks the
worker to start a host agent for it (`Attach`, carrying that agent's
bootstrap, with the run's own keys), and later to end it (`Release`); the
worker answers each, and says when the agent ended by itself (`Ended`).
Messages are msgpack, decoded into these types only (never unpickled), and at
most `FRAME_BYTES` long, before and after the handshake.
"""

from __future__ import annotations

import ipaddress
import socket

import msgspec
import zmq

from danaus.transports.tcp.bootstrap import Bootstrap
from danaus.transports.tcp.security import JobKeys

DEFAULT_PORT = 26600
FRAME_BYTES = 256 * 1024
"""Largest message on the link (an `Attach` holds a bootstrap: paths and keys)."""
HANDSHAKE_TIMEOUT = 5.0


class Attach(msgspec.Struct, tag="attach", array_like=True):
    """Start a host agent for this controller; ``token`` names this attachment."""

    token: str
    boot: Bootstrap


class Release(msgspec.Struct, tag="release", array_like=True):
    """End the host agent of attachment ``token``; exit afterwards if ``final``."""

    token: str
    final: bool


class Attached(msgspec.Struct, tag="attached", array_like=True):
    """The host agent is starting; it registers with the controller's directory."""

    token: str
    host: str
    pid: int


class Busy(msgspec.Struct, tag="busy", array_like=True):
    """The worker serves another controller; try again later."""

    token: str
    reason: str


class Released(msgspec.Struct, tag="released", array_like=True):
    token: str


class Ended(msgspec.Struct, tag="ended", array_like=True):
    """The host agent ended without being released: ``code`` as `subprocess` gives it."""

    token: str
    code: int


ToWorker = Attach | Release
ToController = Attached | Busy | Released | Ended

_encoder = msgspec.msgpack.Encoder()
_to_worker = msgspec.msgpack.Decoder(ToWorker)
_to_controller = msgspec.msgpack.Decoder(ToController)


def encode(message: ToWorker | ToController) -> bytes:
    return _encoder.encode(message)


def decode_to_worker(frame: bytes) -> ToWorker:
    """Raise ``ValueError`` for anything that is not a message for a worker."""
    try:
        return _to_worker.decode(frame)
    except (msgspec.MsgspecError, ValueError) as exc:
        raise ValueError(f"bad message for a worker: {exc}") from None


def decode_to_controller(frame: bytes) -> ToController:
    try:
        return _to_controller.decode(frame)
    except (msgspec.MsgspecError, ValueError) as exc:
        raise ValueError(f"bad message from a worker: {exc}") from None


def parse_address(text: str) -> tuple[str, int]:
    """``(ip, port)`` of ``tcp://host:port``, ``host:port`` or ``host`` (port 26600).

    A host name is resolved to its address; ``ValueError`` if it cannot be.
    """
    rest = text.removeprefix("tcp://")
    if "://" in rest:
        raise ValueError(f"a worker address is tcp://HOST:PORT, not {text!r}")
    host, port = rest, DEFAULT_PORT
    if rest.startswith("["):
        host, _, tail = rest[1:].partition("]")
        if tail:
            port = _port(text, tail.removeprefix(":"))
    elif rest.count(":") == 1:
        host, _, port_text = rest.partition(":")
        port = _port(text, port_text)
    if not host:
        raise ValueError(f"no host in the address {text!r}")
    try:
        return str(ipaddress.ip_address(host)), port
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise ValueError(f"cannot resolve the host of {text!r}: {exc.strerror}") from None
    return str(infos[0][4][0]), port


def _port(text: str, port: str) -> int:
    if not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f"bad port in the address {text!r}")
    return int(port)


def endpoint(ip: str, port: int) -> str:
    """The zmq endpoint of ``ip:port``."""
    return f"tcp://[{ip}]:{port}" if ":" in ip else f"tcp://{ip}:{port}"


def is_wildcard(ip: str) -> bool:
    return ipaddress.ip_address(ip).is_unspecified


def is_loopback(ip: str) -> bool:
    return ipaddress.ip_address(ip).is_loopback


def bound(sock: zmq.Socket) -> None:
    """The link's limits: small frames, a handshake deadline, no lingering."""
    sock.maxmsgsize = FRAME_BYTES
    sock.handshake_ivl = int(HANDSHAKE_TIMEOUT * 1000)
    sock.linger = 0


def listen(context: zmq.Context, keys: JobKeys, ip: str, port: int) -> zmq.Socket:
    """The worker's end: a ROUTER that admits only holders of the job's key."""
    router = context.socket(zmq.ROUTER)
    keys.serve(router)
    bound(router)
    router.bind(endpoint(ip, port))
    return router


def connect(context: zmq.Context, keys: JobKeys, ip: str, port: int) -> zmq.Socket:
    """The controller's end: a DEALER that trusts only a holder of the job's key."""
    dealer = context.socket(zmq.DEALER)
    keys.connect_as_client(dealer)
    bound(dealer)
    dealer.connect(endpoint(ip, port))
    return dealer
