"""The documentation's code runs, and so do the examples.

Convention for docs/*.md and README.md: a fenced block whose info string is exactly ``python``
is executed. All such blocks of one page, concatenated in order, form one script,
which is run in a subprocess on the simulator. A block meant to be shown but not
run uses another info string: ``py``, or ``python`` with attributes such as
``python title="..."``. Shell commands use ``bash``.

A page's script must not print a traceback, except on the pages listed in
``FAILS_ON_PURPOSE``: their examples make actors fail, and each failure is
logged with its traceback. Those log records, and nothing else, may contain one.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
EXAMPLES = ROOT / "examples"

FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.DOTALL | re.MULTILINE)

FAILS_ON_PURPOSE = {"fault-tolerance.md"}

# The simulator's log record of a failed actor: the cause, then its traceback.
FAILURE_RECORD = re.compile(
    r"^actor \S+ failed: .*\nTraceback \(most recent call last\):\n(?:  .*\n)*\S.*\n",
    re.MULTILINE,
)


def python_blocks(page: Path) -> list[str]:
    """The executed blocks of a page, in order."""
    return FENCE.findall(page.read_text())


def pages_with_code() -> list[Path]:
    pages = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
    return [page for page in pages if python_blocks(page)]


def run_script(path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DANAUS_TRANSPORT": "sim"}
    return subprocess.run(
        [sys.executable, str(path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def check(
    result: subprocess.CompletedProcess[str], what: str, fails_on_purpose: bool = False
) -> None:
    assert result.returncode == 0, (
        f"{what} exited with {result.returncode}\n"
        f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    )
    stderr = FAILURE_RECORD.sub("", result.stderr) if fails_on_purpose else result.stderr
    assert "Traceback" not in stderr, f"{what} printed a traceback:\n{result.stderr}"


def test_getting_started_has_code():
    blocks = python_blocks(DOCS / "getting-started.md")
    assert len(blocks) > 10
    assert any("assert" in block for block in blocks)


@pytest.mark.parametrize("page", pages_with_code(), ids=lambda p: p.name)
def test_page_code_runs(page: Path, tmp_path: Path):
    script = tmp_path / f"{page.stem.replace('-', '_')}.py"
    script.write_text("\n\n".join(python_blocks(page)))
    check(
        run_script(script),
        f"the code of {page.relative_to(ROOT)}",
        fails_on_purpose=page.name in FAILS_ON_PURPOSE,
    )


@pytest.mark.parametrize("name", ["getting_started.py", "monarch_intro.py"])
def test_example_runs(name: str):
    result = run_script(EXAMPLES / name)
    check(result, f"examples/{name}")
    assert result.stdout.strip()


def test_sim_command_gives_the_same_digest_twice():
    """As docs/simulator.md says: the same program and seed, the same trace."""
    command = [
        sys.executable,
        "-m",
        "danaus.cli",
        "sim",
        "examples/getting_started.py::main",
        "--hosts",
        "2",
        "--seed",
        "7",
    ]
    digests = []
    for _ in range(2):
        result = subprocess.run(
            command, cwd=ROOT, capture_output=True, text=True, timeout=120, check=True
        )
        digests.append(result.stdout.strip().splitlines()[-1])
    assert digests[0].startswith("trace digest: ")
    assert digests[0] == digests[1]


def test_the_docs_name_no_path_outside_the_repository():
    for page in [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]:
        text = page.read_text()
        assert not re.search(r"(^|[\s`(])\.\./", text, re.MULTILINE), page.name
        assert "shared/" not in text, page.name


def test_the_monarch_page_lists_as_missing_nothing_that_exists():
    """Each "not yet" row names none of the debugger, `danaus top` or OpenTelemetry."""
    rows = (DOCS / "monarch.md").read_text().splitlines()
    missing = [row for row in rows if "not yet" in row]
    for row in missing:
        for existing in ("debugger", "telemetry", "debug_controller", "get_meter", "traced"):
            assert existing not in row.split("not yet")[0] or "different" in row, row
