"""A worker address where nothing listens: the controller says so at once, and again while it
retries, with what it waits for and how long is left; at the deadline the host fails with the
reason."""

from __future__ import annotations

import re
import socket

from tests.tcp.conftest import run_script

TIMEOUT = 6

CONTROLLER = f"""
import danaus
from danaus import SupervisionError, attach_to_workers, make_job_key

hosts = attach_to_workers(["127.0.0.1:{{port}}"], key=make_job_key(), timeout={TIMEOUT})
try:
    hosts.initialized.get()
except SupervisionError as error:
    print("failed:", error)
"""


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_connection_refused_shows_at_once_and_while_retrying(tmp_path):
    port = closed_port()
    ran = run_script(CONTROLLER.format(port=port), tmp_path, timeout=120)
    assert ran.returncode == 0, ran.stderr
    warnings = re.findall(
        rf"attach: worker at tcp://127\.0\.0\.1:{port}: Connection refused; retrying until a "
        r"worker listens there \((\d+) s left of the attach timeout\)",
        ran.stderr,
    )
    # The first warning comes as the first connection fails, with (about) all the time left;
    # the next ones as the retries go on.
    assert warnings, ran.stderr
    assert int(warnings[0]) >= TIMEOUT - 1, ran.stderr
    assert len(warnings) >= 2 and int(warnings[-1]) < int(warnings[0]), ran.stderr
    assert "could not be attached: could not connect (Connection refused: is a worker " in (
        ran.stdout
    ), ran.stdout
    assert f"within {TIMEOUT} s" in ran.stdout
