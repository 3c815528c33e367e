"""Random and mutated bytes fed to the ucx frame headers, read after authentication: each is
accepted only when valid and within the limits (the challenge before is `tests/test_challenge.py`).

Hypothesis runs without a deadline, so no test here depends on the machine's speed.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

pytest.importorskip("ucxx")

from danaus.transports.ucx import framing
from tests.tcp.test_decoders_fuzz import LIMIT, PURE, mutated

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
