"""torch is an optional extra: Danaus imports it only for the tensor engine, and says which extra
to install when a program uses the engine without it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

WITHOUT_TORCH = """
import sys
sys.modules["torch"] = None  # as if torch were not installed
import danaus
from danaus import this_host
import danaus.sim

def main():
    mesh = this_host().spawn_procs({"gpu": 2})
    uses = (lambda: danaus.inspect, lambda: mesh.activate(), lambda: __import__("danaus.tensor"))
    for use in uses:
        try:
            use()
        except ModuleNotFoundError as exc:
            print(exc)
        else:
            print("no error")

danaus.sim.run(main)
"""


def run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


def test_importing_danaus_does_not_import_torch():
    done = run(
        "import sys, danaus; danaus.Actor; danaus.this_host; danaus.ProcMesh.activate; "
        "print(sorted(m for m in ('torch', 'numpy') if m in sys.modules))"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_the_tensor_engine_without_torch_names_the_extra_in_one_line():
    done = run(WITHOUT_TORCH)
    assert done.returncode == 0, done.stderr
    expected = "the Danaus tensor engine needs torch: pip install 'danaus[torch]'"
    assert done.stdout.splitlines() == [expected] * 3
