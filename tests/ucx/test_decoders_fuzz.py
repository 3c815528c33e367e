"""Random and mutated bytes fed to the ucx decoders: the challenge (before authentication)
and frame headers (after): each accepts only what is valid and within the limits.

Hypothesis runs without a deadline, so no test here depends on the machine's speed.
"""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

pytest.importorskip("ucxx")

from danaus.transports.ucx import framing, handshake
from tests.tcp.test_decoders_fuzz import LIMIT, PURE, SECRET, mutated

# ---- ucx, before authentication: the challenge -------------------------------------------

NONCE = b"n" * handshake.NONCE_BYTES
OWN = b"o" * handshake.NONCE_BYTES
ANSWER = handshake.answer(SECRET, b"root:1.0", NONCE, OWN)


@PURE
@given(mutated(handshake.greeting(NONCE)), mutated(ANSWER))
def test_ucx_challenge_accepts_only_what_proves_the_secret(greeting: bytes, answer: bytes):
    with contextlib.suppress(handshake.HandshakeError):
        assert handshake.read_greeting(greeting) == greeting[len(handshake.MAGIC) :]
    try:
        proc, nonce = handshake.check_answer(SECRET, answer, NONCE)
    except handshake.HandshakeError:
        return
    assert answer == handshake.answer(SECRET, proc.encode(), NONCE, nonce)


@PURE
@given(mutated(handshake.welcome(SECRET, NONCE, OWN, "root:1.0")))
def test_ucx_welcome_accepts_only_the_secret_s_proof(welcome: bytes):
    expected = handshake.welcome(SECRET, NONCE, OWN, "root:1.0")
    try:
        handshake.check_welcome(SECRET, welcome, NONCE, OWN, b"root:1.0")
    except handshake.HandshakeError:
        assert welcome != expected
    else:
        assert welcome == expected


# ---- ucx, after authentication: frame headers --------------------------------------------

sizes = st.lists(st.integers(0, 1 << 63), max_size=8)


@PURE
@given(st.one_of(sizes.map(framing.header), sizes.map(framing.header).flatmap(mutated)))
def test_ucx_headers_are_within_the_limits_or_refused(data: bytes):
    try:
        found = framing.read_header(data, LIMIT)
    except framing.FramingError:
        return
    assert len(found) <= framing.MAX_FRAMES and sum(found) <= LIMIT
