"""The benchmarks run end to end and print what they promise (never a speed check)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

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
    "first_mesh_4": {"runs", "procs", "danaus_first_mesh_s", "danaus_wall_s", "danaus_cpu_s"},
    "hello_world_2": {"runs", "procs", "danaus_first_mesh_s", "danaus_wall_s", "danaus_cpu_s"},
}


def run_benchmark(script: str, *args: str) -> list[dict]:
    """Run ``benchmarks/<script>`` without DANAUS_TRANSPORT set; the JSON lines it printed."""
    env = {k: v for k, v in os.environ.items() if k != "DANAUS_TRANSPORT"}
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads(line) for line in done.stdout.splitlines()]


@pytest.mark.parametrize("transport", ["sim", "tcp"])
def test_messaging_quick(transport: str) -> None:
    args = ["--quick"] if transport == "tcp" else ["--quick", "--transport", transport]
    rows = run_benchmark("messaging.py", *args)
    assert [row["workload"] for row in rows] == list(EXPECTED)
    for row in rows:
        assert row["transport"] == transport
        assert "danaus_error" not in row, row
        missing = EXPECTED[row["workload"]] - row.keys()
        assert not missing, f"{row['workload']} lacks {sorted(missing)}: {row}"
        for key in EXPECTED[row["workload"]]:
            if key.startswith("danaus_"):
                assert isinstance(row[key], (int, float)) and row[key] > 0, (key, row)


def test_first_mesh_one_run() -> None:
    """One program's first mesh of 2 procs: its CPU times, and how far ahead its fork server
    started (before ``this_host()``, since ``configure`` starts it)."""
    (row,) = run_benchmark("first_mesh.py", "--procs", "2", "--runs", "1")
    assert row["benchmark"] == "first_mesh" and row["procs"] == 2 and row["runs"] == 1
    assert row["server_lead_cpu_s"] > 0, row
    for key in ("server_lead_s", "proc_cpu_ms", "controller_cpu_ms", "first_mesh_s"):
        assert row[key] > 0 and row[f"{key}_range"] == [row[key], row[key]], (key, row)


def test_rdma_quick() -> None:
    """sim, then tcp encrypted and in clear, each reading and writing 1 and 16 MiB."""
    rows = run_benchmark("rdma.py", "--quick", "--transport", "sim,tcp")
    expected = [
        (transport, encrypt, f"{op}_{mib}MiB", op, mib << 20)
        for transport, encrypt in [("sim", None), ("tcp", True), ("tcp", False)]
        for mib in (1, 16)
        for op in ("read_into", "write_from")
    ]
    keys = ("transport", "encrypt", "workload", "op", "bytes")
    assert [tuple(row.get(key) for key in keys) for row in rows] == expected
    for row in rows:
        assert "danaus_error" not in row, row
        assert row["repeats"] == 2
        for key in ("danaus_mb_per_s", "danaus_median_s"):
            assert isinstance(row[key], (int, float)) and row[key] > 0, (key, row)
        owner_cpu = ("danaus_owner_cpu_ms", "danaus_owner_cpu_pct")
        if row["transport"] == "sim":  # the owner shares the controller's process
            assert not set(owner_cpu) & row.keys(), row
        else:
            assert all(row[key] >= 0 for key in owner_cpu), row


def test_sim_scale_small() -> None:
    """A small cluster and a few chaos seeds: one line each, with the figures it promises."""
    scale, chaos = run_benchmark("sim_scale.py", "--sizes", "64", "--rounds", "2", "--seeds", "5")
    assert scale["benchmark"] == "sim_broadcast_gather" and scale["procs"] == 64
    assert scale["messages_delivered"] >= 2 * 2 * 64
    assert scale["round_messages"] == 2 * 2 * 64
    for key in ("cpu_s", "round_cpu_s", "round_messages_per_cpu_s"):
        assert scale[key] > 0, (key, scale)
    assert scale["round_gc_cpu_s"] >= 0 and scale["setup_gc_cpu_s"] >= 0
    assert chaos["benchmark"] == "chaos_training" and chaos["seeds"] == 5
    assert chaos["faults"] > 0 and chaos["failed_seeds"] == 0
    for key in ("seeds_per_wall_minute", "simulated_s_per_wall_s", "simulated_s"):
        assert chaos[key] > 0, (key, chaos)


def test_sim_scale_profile() -> None:
    """--profile adds, per size, where the rounds' time goes per delivered message."""
    scale, profile = run_benchmark(
        "sim_scale.py", "--sizes", "64", "--rounds", "1", "--seeds", "0", "--profile"
    )
    assert profile["benchmark"] == "sim_profile" and profile["procs"] == scale["procs"] == 64
    assert profile["messages"] == scale["round_messages"] == 2 * 64
    assert profile["profiled_us_per_message"] > 0
    assert "danaus/transports/sim/network.py" in profile["areas"]
    assert profile["functions"], profile
    for row in profile["functions"]:
        assert {"function", "calls_per_message", "own_us_per_message", "total_us_per_message"} == (
            row.keys()
        )


def test_broadcast_small_on_sim() -> None:
    """Casts to 16 simulated procs along trees of fan-out 4: two lines with what they promise."""
    gather, cast = run_benchmark(
        "broadcast.py", "--transport", "sim", "--procs", "16", "--casts", "5", "--fanout", "4"
    )
    assert [gather["workload"], cast["workload"]] == ["broadcast_gather", "broadcast"]
    for row, rate, unit in [(gather, "calls_per_s", "call"), (cast, "casts_per_s", "cast")]:
        assert row["procs"] == 16 and row["cast_fanout"] == 4, row
        assert row["wait_spin_us"] is None, row
        for key in (rate, f"controller_cpu_us_per_{unit}", f"simulated_us_per_{unit}"):
            assert row[key] > 0, (key, row)


def test_hot_path_small_bound() -> None:
    """A few round trips with each process on a CPU of its own: every stage, and the CPU spent."""
    rows = run_benchmark(
        "hot_path.py", "--calls", "50", "--warmup", "5", "--bind", "--wait-spin-us", "0"
    )
    assert [row["workload"] for row in rows] == [
        "round_trip",
        "round_trip_traced",
        "cpu_per_round_trip",
        *["stage"] * 5,
    ]
    assert all(row["bound"] and not row["home_cpus"] for row in rows), rows
    assert all(row["wait_spin_us"] == 0 for row in rows), rows
    assert all(row["median_us"] > 0 for row in rows if "median_us" in row), rows
    [cpu] = [row for row in rows if row["workload"] == "cpu_per_round_trip"]
    assert cpu["caller_user_us"] + cpu["caller_system_us"] > 0, cpu
    assert cpu["actor_proc_user_us"] + cpu["actor_proc_system_us"] > 0, cpu


def test_bytes_receive_small() -> None:
    rows = run_benchmark("bytes_receive.py", "--mib", "1", "--repeats", "2")
    assert [row["way"] for row in rows] == [
        "kept_buffer_and_copy",
        "new_storage",
        "new_storage_populated",
        "kept_storage",
    ]
    assert all(row["cpu_ms"] >= 0 and row["wall_ms"] > 0 for row in rows), rows


def test_large_argument_small() -> None:
    """An 8 MiB argument (chunked at the default 4 MiB frames) and the heartbeat silence."""
    [row] = run_benchmark("large_argument.py", "--size", "8", "--runs", "1")
    assert row["benchmark"] == "large_argument" and row["procs_alive_after"] == 2
    assert row["median_s"] > 0 and 0 <= row["longest_heartbeat_silence_s"] < 3


def test_top_overhead_small() -> None:
    """A few procs watched for a second: a snapshot's cost and the slowdown, as promised."""
    [row] = run_benchmark(
        "top_overhead.py", "--procs", "3", "--seconds", "1", "--rounds", "1", "--snapshots", "5"
    )
    assert row["benchmark"] == "top_overhead" and row["procs_in_snapshot"] == 4
    assert row["snapshots"] >= 1 and 0 < row["snapshot_gather_s"]["max"] < 1
    assert row["job_cpu_ms_per_snapshot"]["median"] > 0
    for key in ("plain_rounds_per_s", "watched_rounds_per_s"):
        assert row[key]["median"] > 0, (key, row)


def test_dashboard_overhead_small() -> None:
    """A few procs with the dashboard's page open (in Chromium, where it is installed, else
    its event stream read): every figure it promises."""
    [row] = run_benchmark(
        "dashboard_overhead.py",
        *("--procs", "3", "--rounds", "1", "--quick", "--loads", "2"),
        *("--dumps", "2", "--idle-seconds", "0.5", "--profile-seconds", "0.5"),
    )
    assert row["benchmark"] == "dashboard_overhead" and row["procs_on_the_page"] == 8
    if row["client"] == "browser":
        assert row["page"]["loads"] == 2, row
        for key in ("first_contentful_paint_s", "topology_drawn_s"):
            assert 0 < row["page"][key]["median"] < 30, (key, row)
    for name, figure in row["messaging"].items():
        assert figure["closed"] > 0 and figure["open"] > 0, (name, row)
    assert row["idle_cpu"]["dashboard_server_open_cpu_ms_per_s"] >= 0
    stacks = row["stacks_of_a_busy_proc"]
    for key in ("admin_request_s", "page_request_s", "proc_walks_its_frames_s"):
        assert 0 < stacks[key]["median"] < 30, (key, row)
    assert stacks["profile_at_100hz"]["samples"] > 0


def test_multihost_small() -> None:
    """Three namespace hosts on tcp: one line per figure (or one saying why it cannot run)."""
    rows = run_benchmark(
        "multihost.py", "--transport", "tcp", "--runs", "1", "--calls", "20", "--mib", "1"
    )
    if rows[0].get("skipped"):
        pytest.skip(rows[0]["skipped"])
    assert [row["benchmark"] for row in rows] == [
        "mesh_up_attach",
        "hosts_call_rtt",
        "hosts_payload",
    ]
    assert rows[0]["hosts"] == 3 and rows[0]["procs_per_host"] == 2
    for key, row in [("median_s", rows[0]), ("median_us", rows[1]), ("mb_per_s", rows[2])]:
        assert row[key] > 0, row


@pytest.mark.xdist_group("slurm")  # its SLURM cluster and the session's share ports
def test_slurm_small() -> None:
    """A three-node SLURM cluster on this host, one mesh-up run (or a line saying why not)."""
    rows = run_benchmark("slurm.py", "--runs", "1")
    if rows[0].get("skipped"):
        pytest.skip(rows[0]["skipped"])
    assert [row["benchmark"] for row in rows] == ["slurm_mesh_up"]
    assert rows[0]["hosts"] == 3 and rows[0]["procs_per_host"] == 2 and rows[0]["runs"] == 1
    for key in ("mesh_up_median_s", "apply_median_s", "kill_median_s"):
        assert rows[0][key] > 0, rows[0]
