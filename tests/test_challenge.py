"""The challenge that opens every data connection (tcp, ucx), fed random and mutated bytes.

Both sides read fixed-size messages and accept only what proves the job's
secret; both sides of a passed challenge agree on the session key, and no one
else can. Hypothesis runs without a deadline, so no test depends on speed.
"""

from __future__ import annotations

import pytest
from hypothesis import given

from danaus.transports import challenge
from tests.tcp.test_decoders_fuzz import PURE, SECRET, mutated

SERVER = challenge.Ephemeral()
CLIENT = challenge.Ephemeral()
GREETING = challenge.greeting(SERVER)
ANSWER = challenge.answer(SECRET, b"root:1.0", GREETING, CLIENT)
EXCHANGE, WELCOME = challenge.check_answer(SECRET, ANSWER, GREETING, SERVER)


def test_both_sides_agree_on_the_proc_and_the_session_key():
    theirs = challenge.check_welcome(SECRET, WELCOME, GREETING, ANSWER, CLIENT)
    assert theirs == EXCHANGE
    assert EXCHANGE.proc == "root:1.0"
    assert theirs.session_key(SECRET) == EXCHANGE.session_key(SECRET)
    assert EXCHANGE.session_key(b"another job's secret") != EXCHANGE.session_key(SECRET)


def test_a_second_challenge_of_the_same_procs_agrees_on_another_key():
    server, client = challenge.Ephemeral(), challenge.Ephemeral()
    greeting = challenge.greeting(server)
    answer = challenge.answer(SECRET, b"root:1.0", greeting, client)
    exchange, _ = challenge.check_answer(SECRET, answer, greeting, server)
    assert exchange.session_key(SECRET) != EXCHANGE.session_key(SECRET)


def test_an_answer_under_another_secret_is_refused():
    answer = challenge.answer(b"not the job's", b"root:1.0", GREETING, CLIENT)
    with pytest.raises(challenge.HandshakeError):
        challenge.check_answer(SECRET, answer, GREETING, SERVER)


@PURE
@given(mutated(GREETING))
def test_only_a_well_formed_greeting_is_read(greeting: bytes):
    try:
        nonce, public = challenge.read_greeting(greeting)
    except challenge.HandshakeError:
        return
    assert greeting == challenge.MAGIC + nonce + public


@PURE
@given(mutated(ANSWER))
def test_only_an_answer_that_proves_the_secret_is_accepted(answer: bytes):
    try:
        challenge.check_answer(SECRET, answer, GREETING, SERVER)
    except challenge.HandshakeError:
        assert answer != ANSWER
    else:
        assert answer == ANSWER


@PURE
@given(mutated(WELCOME))
def test_only_the_secret_s_welcome_is_accepted(welcome: bytes):
    try:
        challenge.check_welcome(SECRET, welcome, GREETING, ANSWER, CLIENT)
    except challenge.HandshakeError:
        assert welcome != WELCOME
    else:
        assert welcome == WELCOME
