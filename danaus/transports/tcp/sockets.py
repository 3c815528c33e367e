"""The zmq sockets of both planes: one authenticated ROUTER in, a DEALER per peer out.

The control plane (on the I/O thread) and the zmq data plane (on the runtime
loop's thread) set their sockets up alike and check what arrives alike; this
is that shared part. Every socket reads frames of at most ``frame_bytes``
(libzmq applies it from the first handshake command on, so a stranger cannot
make a proc buffer more) and gives a handshake ``handshake_timeout`` seconds.
"""

from __future__ import annotations

import logging

import zmq

from danaus.core.settings import Limits
from danaus.transports.tcp.security import JobKeys

log = logging.getLogger("danaus.tcp")

RECV_BATCH = 256
"""Messages a ROUTER's reader takes in one go before it lets other work run."""


def _bound(sock: zmq.Socket, limits: Limits) -> None:
    sock.maxmsgsize = limits.frame_bytes
    sock.handshake_ivl = int(limits.handshake_timeout * 1000)


def bind_router(context: zmq.Context, keys: JobKeys, bind_host: str, limits: Limits) -> zmq.Socket:
    """A ROUTER on a free port of ``bind_host`` that admits only members of the job."""
    router = context.socket(zmq.ROUTER)
    keys.serve(router)
    _bound(router, limits)
    router.linger = 0
    router.rcvhwm = 0
    router.bind(f"tcp://{bind_host}:*")
    return router


def connect_dealer(
    context: zmq.Context, keys: JobKeys, proc: str, endpoint: str, limits: Limits
) -> zmq.Socket:
    """A DEALER from ``proc`` to ``endpoint``, presenting the job's key."""
    dealer = context.socket(zmq.DEALER)
    keys.connect_as_client(dealer)
    _bound(dealer, limits)
    dealer.identity = proc.encode()
    dealer.sndhwm = 0
    dealer.linger = 1000
    dealer.connect(endpoint)
    return dealer


def sender(proc: str, message: list[zmq.Frame]) -> str | None:
    """Who sent ``message`` to ``proc``'s ROUTER; None (logged) if it is malformed.

    A message is the sender's identity, a kind frame and at least one more.
    """
    if len(message) < 3:
        log.error("proc %s: rejected a message of %d frames", proc, len(message))
        return None
    try:
        return message[0].bytes.decode()
    except UnicodeDecodeError:
        log.error("proc %s: rejected a message from a peer with a bad identity", proc)
        return None
