"""The packets emulated devices exchange: a fixed header, then the payload it announces.

One stream socket joins each pair of devices, like a cable. A device that
connects first sends its GID (16 bytes), so the other knows whose packets
arrive on it. Requests (SEND, RDMA WRITE, RDMA READ) carry the requester's
packet sequence number; the responder answers each in order, with an ACK, a
READ RESPONSE carrying the bytes, or a NAK saying why not.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

GID_BYTES = 16


class Kind(enum.IntEnum):
    SEND = 1
    WRITE = 2
    READ = 3
    READ_RESPONSE = 4
    ACK = 5
    NAK = 6


class Nak(enum.IntEnum):
    """Why a responder refused a request."""

    RECEIVER_NOT_READY = 1
    """No receive was posted; ``code`` carries the responder's ``min_rnr_timer``."""
    REMOTE_ACCESS = 2
    """An unknown key, a range outside the region, or access the region or queue pair forbid."""
    INVALID_REQUEST = 3
    """A SEND larger than the receive posted for it."""


_HEADER = struct.Struct("<BBBxIIIQII")


@dataclass(frozen=True)
class Header:
    """One packet's header; ``length`` payload bytes follow SEND, WRITE and READ RESPONSE."""

    kind: Kind
    src_qpn: int
    dst_qpn: int
    psn: int
    nak: int = 0
    code: int = 0
    address: int = 0
    rkey: int = 0
    length: int = 0

    SIZE = _HEADER.size

    def pack(self) -> bytes:
        return _HEADER.pack(
            self.kind,
            self.nak,
            self.code,
            self.src_qpn,
            self.dst_qpn,
            self.psn,
            self.address,
            self.rkey,
            self.length,
        )

    @classmethod
    def unpack(cls, data: bytes | bytearray | memoryview) -> Header:
        """Raise ``ValueError`` for a packet kind that does not exist."""
        kind, nak, code, src, dst, psn, address, rkey, length = _HEADER.unpack(data)
        return cls(Kind(kind), src, dst, psn, nak, code, address, rkey, length)

    @property
    def has_payload(self) -> bool:
        return self.kind in (Kind.SEND, Kind.WRITE, Kind.READ_RESPONSE)


def socket_name(gid: bytes) -> bytes:
    """The abstract Unix socket address of the device with ``gid``."""
    return b"\0danaus-verbs-emulated/" + gid.hex().encode()
