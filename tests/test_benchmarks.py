"""The messaging benchmark runs end to end and prints what it promises (never a speed check)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "messaging.py"

PAYLOAD_KEYS = {"kind", "bytes", "calls", "danaus_mb_per_s", "danaus_median_ms"}
EXPECTED = {
    "call_one_rtt": {"calls", "danaus_median_us", "danaus_p99_us"},
    "pipelined_call_one": {"calls", "danaus_calls_per_s"},
    "broadcast_gather_4": {"calls", "procs", "danaus_calls_per_s", "danaus_median_us"},
    "payload_bytes_1MiB": PAYLOAD_KEYS,
    "payload_bytes_64MiB": PAYLOAD_KEYS,
    "payload_tensor_1MiB": PAYLOAD_KEYS,
    "payload_tensor_64MiB": PAYLOAD_KEYS,
    "mesh_up_4": {"runs", "procs", "danaus_median_s", "danaus_first_s"},
}


@pytest.mark.parametrize("transport", ["sim", "tcp"])
def test_messaging_quick(transport: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "DANAUS_TRANSPORT"}
    args = [sys.executable, str(SCRIPT), "--quick"]
    if transport != "tcp":
        args += ["--transport", transport]
    done = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert [row["workload"] for row in rows] == list(EXPECTED)
    for row in rows:
        assert row["transport"] == transport
        assert "danaus_error" not in row, row
        missing = EXPECTED[row["workload"]] - row.keys()
        assert not missing, f"{row['workload']} lacks {sorted(missing)}: {row}"
        for key in EXPECTED[row["workload"]]:
            if key.startswith("danaus_"):
                assert isinstance(row[key], (int, float)) and row[key] > 0, (key, row)
