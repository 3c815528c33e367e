"""The challenge that opens every data connection: fixed-size messages, each checked.

A connection proves itself first, in three messages of fixed size, which the
receiver reads into buffers of exactly that size (a stranger can make it
allocate nothing more, nor trust any size):

1. ``greeting`` (accepting side): the protocol's magic, a random nonce and an
   ephemeral X25519 public key;
2. ``answer`` (connecting side): its proc id, a nonce and an ephemeral public
   key of its own, and an HMAC of everything so far under the job's secret;
3. ``welcome`` (accepting side): an HMAC of the same under the secret, so the
   connecting side also knows it talks to a member before it sends anything.

Fresh nonces on both sides make a recorded exchange useless to replay. The two
ephemeral keys agree on a secret that only this connection knows; with the
job's secret it keys the connection's encryption (`Exchange.session_key`), so
that traffic recorded today stays unreadable even if the job's key leaks later.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from dataclasses import dataclass

# The first X25519PrivateKey.generate() of a process imports OpenSSL's backend and sets it
# up (about 4 ms of CPU). Imported with this module instead, that is done once in a fork
# server for every worker it forks, and in a controller while its procs start, not on the
# way of each process's first connection.
import cryptography.hazmat.backends.openssl.backend  # noqa: F401
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

MAGIC = b"DNSU6"
"""Changed with the protocol that follows the challenge (4: a shared ring on Unix sockets;
5: ucx numbers a pair's messages only after a mark, and each record of a message lies within
one frame; 6: a large message's header record carries its leading small frames), so a proc
of another version is refused at its greeting, not misread after it."""
NONCE_BYTES = 16
KEY_BYTES = 32
PROOF_BYTES = 32
MAX_PROC_BYTES = 255
SESSION_KEY_BYTES = 32

GREETING_BYTES = len(MAGIC) + NONCE_BYTES + KEY_BYTES
ANSWER_BYTES = 1 + MAX_PROC_BYTES + NONCE_BYTES + KEY_BYTES + PROOF_BYTES
WELCOME_BYTES = PROOF_BYTES


class HandshakeError(PermissionError):
    """A peer failed the challenge (or is not a Danaus proc)."""


@dataclass(frozen=True)
class Exchange:
    """What both sides of one challenge know once it has passed."""

    proc: str
    """The connecting proc's id."""
    greeting_nonce: bytes
    answer_nonce: bytes
    shared: bytes
    """The secret the two ephemeral keys agreed on."""

    def session_key(self, secret: bytes) -> bytes:
        """The key of this connection's traffic: from the agreed secret and the job's."""
        return HKDF(
            algorithm=hashes.SHA256(),
            length=SESSION_KEY_BYTES,
            salt=self.greeting_nonce + self.answer_nonce,
            info=b"danaus data connection/" + self.proc.encode(),
        ).derive(self.shared + hmac.new(secret, b"danaus session", hashlib.sha256).digest())


class Ephemeral:
    """One side's fresh nonce and key pair for one challenge."""

    def __init__(self) -> None:
        self.nonce = os.urandom(NONCE_BYTES)
        self._key = X25519PrivateKey.generate()
        self.public = self._key.public_key().public_bytes_raw()

    def agree(self, peer_public: bytes) -> bytes:
        try:
            return self._key.exchange(X25519PublicKey.from_public_bytes(peer_public))
        except ValueError:
            raise HandshakeError("the peer sent an unusable key") from None


def _proof(secret: bytes, label: bytes, greeting: bytes, answer_part: bytes) -> bytes:
    return hmac.new(secret, b"/".join([label, greeting, answer_part]), hashlib.sha256).digest()


def greeting(own: Ephemeral) -> bytes:
    return MAGIC + own.nonce + own.public


def read_greeting(data: bytes | bytearray) -> tuple[bytes, bytes]:
    """The accepting side's nonce and public key, from its greeting."""
    if len(data) != GREETING_BYTES or bytes(data[: len(MAGIC)]) != MAGIC:
        raise HandshakeError("the peer did not greet as a Danaus proc")
    nonce_at = len(MAGIC)
    return bytes(data[nonce_at : nonce_at + NONCE_BYTES]), bytes(data[nonce_at + NONCE_BYTES :])


def answer(secret: bytes, proc: bytes, greeting_: bytes, own: Ephemeral) -> bytes:
    """The connecting side's answer to ``greeting_`` (as received)."""
    if not 0 < len(proc) <= MAX_PROC_BYTES:
        raise ValueError(f"a proc id of {len(proc)} bytes does not fit the challenge")
    body = bytes([len(proc)]) + proc.ljust(MAX_PROC_BYTES, b"\0") + own.nonce + own.public
    return body + _proof(secret, b"answer", bytes(greeting_), body)


def check_answer(
    secret: bytes, data: bytes | bytearray, greeting_: bytes, own: Ephemeral
) -> tuple[Exchange, bytes]:
    """The exchange, if the connecting proc's answer proves it holds the secret; the welcome."""
    if len(data) != ANSWER_BYTES:
        raise HandshakeError("a malformed answer to the challenge")
    length = data[0]
    nonce_at = 1 + MAX_PROC_BYTES
    key_at = nonce_at + NONCE_BYTES
    proof_at = key_at + KEY_BYTES
    if length == 0 or any(data[1 + length : nonce_at]):
        raise HandshakeError("a malformed answer to the challenge")
    body = bytes(data[:proof_at])
    if not hmac.compare_digest(bytes(data[proof_at:]), _proof(secret, b"answer", greeting_, body)):
        raise HandshakeError("a wrong answer to the challenge")
    try:
        proc = bytes(data[1 : 1 + length]).decode()
    except UnicodeDecodeError:
        raise HandshakeError("a proc id that is not UTF-8") from None
    exchange = Exchange(proc, own.nonce, bytes(data[nonce_at:key_at]), own.agree(body[key_at:]))
    return exchange, _proof(secret, b"welcome", greeting_, body)


def check_welcome(
    secret: bytes, data: bytes | bytearray, greeting_: bytes, answer_: bytes, own: Ephemeral
) -> Exchange:
    """The exchange, unless the accepting side failed to prove that it holds the secret too."""
    body = answer_[: len(answer_) - PROOF_BYTES]
    expected = _proof(secret, b"welcome", greeting_, body)
    if len(data) != WELCOME_BYTES or not hmac.compare_digest(bytes(data), expected):
        raise HandshakeError("the peer did not prove that it belongs to the job")
    nonce, public = read_greeting(greeting_)
    proc = body[1 : 1 + body[0]].decode()
    return Exchange(proc, nonce, own.nonce, own.agree(public))
