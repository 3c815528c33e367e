"""The DDP tutorial (docs/ddp.md): its code is examples/ddp.py, and it does what the page says."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys

import pytest

from tests.tcp.conftest import ROOT, run_script

PAGE = (ROOT / "docs" / "ddp.md").read_text()
EXAMPLE = (ROOT / "examples" / "ddp.py").read_text()
STDERR_SHOWN = (
    r"^(\[.*\] )?terminate called without an active exception$",
    # What Python's fault handler prints when such a process aborts: where its threads were.
    r"^(\[.*\] )?(Fatal Python error: Aborted|Thread 0x[0-9a-f]+ \(most recent call first\):"
    r"|Current thread 0x[0-9a-f]+ \(most recent call first\):|  File .*|  <no Python frame>"
    r"|Extension modules: .*|)$",
    r"danaus\.security: proc \S+ \(data\) refused a connection from this host \(Unix socket\): "
    r"\[Errno 104\] Connection reset by peer",
    r"^\[proc \S+\] WARNING danaus\.actor: actor \S+ did not stop within 5 s; abandoned$",
    r"^\[driver\] INFO danaus\.supervision: "
    r"stopping proc mesh 'procs' skipped 1 lost member\(s\): ",
)
"""What the page says the example's standard error may hold."""

SCRIPT = f"""
import sys
import danaus

# Many procs use torch at once on a small, shared machine: lenient heartbeats, and
# torch imported once by the fork server instead of by every proc.
danaus.configure(transport="tcp", heartbeat_timeout=30.0, preload=["torch"])
sys.path.insert(0, {str(ROOT / "examples")!r})
import ddp

print("with failure:", ddp.main(20, 12), flush=True)
print("without failure:", ddp.main(20, -1), flush=True)
"""


def test_the_page_shows_the_examples_code():
    included = re.findall(r'^--8<-- "examples/ddp\.py:(\w+)"$', PAGE, re.MULTILINE)
    assert included == ["trainer", "driver", "main"]
    for name in included:
        assert f"# --8<-- [start:{name}]" in EXAMPLE and f"# --8<-- [end:{name}]" in EXAMPLE


@pytest.mark.timeout(900)
def test_a_failed_rank_is_restarted_from_the_last_checkpoint(tmp_path):
    result = run_script(SCRIPT, tmp_path, timeout=900)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    attempts = ast.literal_eval(out.split("with failure: ", 1)[1].splitlines()[0])
    uninterrupted = ast.literal_eval(out.split("without failure: ", 1)[1].splitlines()[0])
    assert attempts[:-1] == [None] and attempts[-1][:2] == (10, 20)
    assert uninterrupted == [(0, 20, attempts[-1][2])]
    assert attempts[-1][2] < 0.5
    assert "[driver] training failed" in out
    assert "told of: MeshFailure(mesh_name=trainers, crashed_ranks=[1], " in out
    assert "event=mesh 'trainers' rank gpus=1" in out and "exit code 1" in out
    shown = re.search(r"^attempt: \(10, 20, ([0-9.]+)\)$", PAGE, re.MULTILINE)
    assert "attempt: None" in PAGE and shown is not None
    # The last digits of a float32 loss depend on the CPU's vector instructions.
    assert float(shown[1]) == pytest.approx(attempts[-1][2], rel=1e-5)
    # Standard error holds only what the page says it may (no unread futures, say).
    for line in result.stderr.splitlines():
        assert any(re.search(allowed, line) for allowed in STDERR_SHOWN), result.stderr


def test_without_torch_it_fails_once_saying_what_to_install(tmp_path):
    shim = tmp_path / "no-torch" / "torch"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'torch'\", name='torch')\n"
    )
    ran = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "ddp.py")],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(shim.parent)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 1
    assert ran.stdout == ""
    message = "this example needs torch (No module named 'torch'): pip install 'danaus[torch]'"
    assert ran.stderr == message + "\n"
    assert message in PAGE
