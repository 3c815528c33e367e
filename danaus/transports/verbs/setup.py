"""What procs tell each other on tcp's control plane to set up and keep the verbs data plane.

These travel on the job's authenticated control sockets (tcp's memory kind,
which on verbs carries no transfers), so a queue pair is only ever connected
to a member of the job. Connecting a queue pair takes three messages:

1. `Offer` (the side that needs the channel): its queue pair's endpoint;
2. `Accept`: the other side made its queue pair, connected it to the offer
   and posted its receives (it can receive); here is its endpoint;
3. `Ready` (message channels only): the offering side is connected too, so
   the accepting side may start to send.

A message channel carries messages both ways; a memory channel carries the
offering side's RDMA reads and writes of the accepting side's memory. `Drop`
asks a buffer's owner to deregister it. (A queue pair that fails is reported
to the controller as any broken data link is: tcp's `control.Unreachable`.)
"""

from __future__ import annotations

from typing import Literal

import msgspec

from danaus.transports.verbs.device import Endpoint

MESSAGES = "messages"
MEMORY = "memory"

Channel = Literal["messages", "memory"]


class Offer(msgspec.Struct, tag="offer", array_like=True):
    channel: Channel
    generation: int
    endpoint: Endpoint
    receives: int


class Accept(msgspec.Struct, tag="accept", array_like=True):
    channel: Channel
    generation: int
    endpoint: Endpoint
    receives: int


class Ready(msgspec.Struct, tag="ready", array_like=True):
    channel: Channel
    generation: int


class Drop(msgspec.Struct, tag="drop", array_like=True):
    key: int


Setup = Offer | Accept | Ready | Drop

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(Setup)


def encode(message: Setup) -> bytes:
    return _encoder.encode(message)


def decode(frame: bytes | memoryview) -> Setup:
    """Raise ``ValueError`` for anything that is not a valid set-up message."""
    try:
        return _decoder.decode(frame)
    except (msgspec.MsgspecError, ValueError) as exc:
        raise ValueError(f"bad verbs set-up message: {exc}") from None
