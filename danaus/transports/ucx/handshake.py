"""The challenge that opens every UCX connection: fixed-size messages, each checked.

UCX authenticates nothing, so a connection proves itself first, in three
messages of fixed size, which the receiver reads into buffers of exactly that
size (a stranger can make it allocate nothing more, nor trust any size):

1. ``greeting`` (accepting side): the protocol's magic and a random nonce;
2. ``answer`` (connecting side): its proc id, a nonce of its own, and an HMAC
   of both nonces and the id under the job's secret;
3. ``welcome`` (accepting side): an HMAC of the same under the secret, so the
   connecting side also knows it talks to a member before it sends anything.

Fresh nonces on both sides make a recorded exchange useless to replay.
"""

from __future__ import annotations

import hashlib
import hmac

MAGIC = b"DNSU2"
NONCE_BYTES = 16
PROOF_BYTES = 32
MAX_PROC_BYTES = 255

GREETING_BYTES = len(MAGIC) + NONCE_BYTES
ANSWER_BYTES = 1 + MAX_PROC_BYTES + NONCE_BYTES + PROOF_BYTES
WELCOME_BYTES = PROOF_BYTES


class HandshakeError(PermissionError):
    """A peer failed the challenge (or is not a Danaus proc)."""


def _proof(
    secret: bytes, label: bytes, greeting_nonce: bytes, answer_nonce: bytes, proc: bytes
) -> bytes:
    message = b"/".join([label, greeting_nonce, answer_nonce, proc])
    return hmac.new(secret, message, hashlib.sha256).digest()


def greeting(nonce: bytes) -> bytes:
    return MAGIC + nonce


def read_greeting(data: bytes | bytearray) -> bytes:
    """The accepting side's nonce, from its greeting."""
    if len(data) != GREETING_BYTES or bytes(data[: len(MAGIC)]) != MAGIC:
        raise HandshakeError("the peer did not greet as a Danaus proc")
    return bytes(data[len(MAGIC) :])


def answer(secret: bytes, proc: bytes, greeting_nonce: bytes, own_nonce: bytes) -> bytes:
    if not 0 < len(proc) <= MAX_PROC_BYTES:
        raise ValueError(f"a proc id of {len(proc)} bytes does not fit the challenge")
    padded = bytes([len(proc)]) + proc.ljust(MAX_PROC_BYTES, b"\0")
    return padded + own_nonce + _proof(secret, b"answer", greeting_nonce, own_nonce, proc)


def check_answer(
    secret: bytes, data: bytes | bytearray, greeting_nonce: bytes
) -> tuple[str, bytes]:
    """The connecting proc's id and nonce, if its answer proves it holds the secret."""
    if len(data) != ANSWER_BYTES:
        raise HandshakeError("a malformed answer to the challenge")
    length = data[0]
    proc = bytes(data[1 : 1 + length])
    nonce_at = 1 + MAX_PROC_BYTES
    if length == 0 or any(data[1 + length : nonce_at]):
        raise HandshakeError("a malformed answer to the challenge")
    nonce = bytes(data[nonce_at : nonce_at + NONCE_BYTES])
    proof = bytes(data[nonce_at + NONCE_BYTES :])
    if not hmac.compare_digest(proof, _proof(secret, b"answer", greeting_nonce, nonce, proc)):
        raise HandshakeError("a wrong answer to the challenge")
    try:
        return proc.decode(), nonce
    except UnicodeDecodeError:
        raise HandshakeError("a proc id that is not UTF-8") from None


def welcome(secret: bytes, greeting_nonce: bytes, answer_nonce: bytes, proc: str) -> bytes:
    return _proof(secret, b"welcome", greeting_nonce, answer_nonce, proc.encode())


def check_welcome(
    secret: bytes, data: bytes | bytearray, greeting_nonce: bytes, own_nonce: bytes, proc: bytes
) -> None:
    """Raise unless the accepting side proved that it holds the secret too."""
    expected = _proof(secret, b"welcome", greeting_nonce, own_nonce, proc)
    if len(data) != WELCOME_BYTES or not hmac.compare_digest(bytes(data), expected):
        raise HandshakeError("the peer did not prove that it belongs to the job")
