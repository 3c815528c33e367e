"""Danaus is typed: the README's and the getting-started tutorial's code type-checks with mypy and
pyright, and an endpoint's adverbs take its parameters and answer with its return type."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_docs import python_blocks

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent

TYPED = '''
from typing import assert_type

from danaus import Actor, Future, ValueMesh, as_endpoint, endpoint, this_host


class Trainer(Actor):
    @endpoint
    def train(self, step: int) -> str:
        return f"trained step {step}"

    @endpoint
    async def loss(self, scale: float = 1.0) -> float:
        return scale

    def helper(self, n: int) -> int:
        return n


procs = this_host().spawn_procs(per_host={"gpus": 8})
trainers = procs.spawn("trainers", Trainer)
assert_type(trainers.train.call(step=0), Future[ValueMesh[str]])
assert_type(trainers.train.call(step=0).get().item(gpus=3), str)
assert_type(trainers.loss.call(), Future[ValueMesh[float]])
assert_type(trainers.loss.call_one(scale=2.0), Future[float])
assert_type(trainers.loss.choose(), Future[float])
assert_type(next(trainers.train.stream(step=1)), Future[str])
assert_type(trainers.train.broadcast(step=1), None)
assert_type(trainers.slice(gpus=slice(0, 4)), Trainer)
assert_type(trainers.slice(gpus=0).train.call_one(step=1).get(), str)
assert_type(trainers.train.call(step=0).get().slice(gpus=1), ValueMesh[str])
assert_type(as_endpoint(trainers.helper).call(1), Future[ValueMesh[int]])
assert_type(trainers.stop(), Future[None])
assert_type(trainers.sizes, dict[str, int])
'''

WRONG = """
from danaus import Actor, endpoint, this_host


class Trainer(Actor):
    @endpoint
    def train(self, step: int) -> str:
        return f"trained step {step}"


trainers = this_host().spawn_procs().spawn("trainers", Trainer)
trainers.train.call(stp=1)
trainers.train.call("zero")
wrong: int = trainers.train.call_one(step=1).get()
"""


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The README's and getting-started's code, each page as one module, and the checks above."""
    directory = tmp_path_factory.mktemp("typing")
    for page in (ROOT / "README.md", ROOT / "docs" / "getting-started.md"):
        blocks = python_blocks(page)
        assert blocks
        (directory / f"{page.stem.replace('-', '_').lower()}.py").write_text("\n".join(blocks))
    (directory / "typed.py").write_text(TYPED)
    (directory / "wrong.py").write_text(WRONG)
    return directory


def line_of(text: str, needle: str) -> int:
    return next(n for n, line in enumerate(text.splitlines(), 1) if needle in line)


def test_mypy_checks_the_examples_and_the_types_of_the_adverbs(sources):
    checked = subprocess.run(
        [str(BIN / "mypy"), "--follow-imports=silent", "--no-incremental", str(sources)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    errors = [line for line in checked.stdout.splitlines() if ": error:" in line]
    started = line_of((sources / "getting_started.py").read_text(), "call(stp=1)")
    keyword, positional = line_of(WRONG, "call(stp=1)"), line_of(WRONG, 'call("zero")')
    assigned = line_of(WRONG, "wrong: int")
    expected = [
        f"getting_started.py:{started}: error: Unexpected keyword argument",
        f"wrong.py:{keyword}: error: Unexpected keyword argument",
        f'wrong.py:{positional}: error: Argument 1 to "call"',
        f"wrong.py:{assigned}: error: Incompatible types in assignment",
    ]
    found = sorted(Path(path).name + ":" + rest for path, rest in (e.split(":", 1) for e in errors))
    assert len(found) == len(expected), checked.stdout
    for line, start in zip(found, sorted(expected)):
        assert line.startswith(start), checked.stdout


@pytest.mark.skipif(
    shutil.which("basedpyright", path=str(BIN)) is None, reason="needs basedpyright: make install"
)
def test_pyright_agrees(sources):
    (sources / "pyrightconfig.json").write_text(
        json.dumps({"typeCheckingMode": "standard", "extraPaths": [str(ROOT)]})
    )
    checked = subprocess.run(
        [str(BIN / "basedpyright"), "--pythonpath", sys.executable, "--outputjson"],
        cwd=sources,
        capture_output=True,
        text=True,
        timeout=300,
    )
    report = json.loads(checked.stdout)
    errors = sorted(
        (Path(d["file"]).name, d["range"]["start"]["line"] + 1)
        for d in report["generalDiagnostics"]
        if d["severity"] == "error"
    )
    started = (sources / "getting_started.py").read_text()
    stp = line_of(started, "call(stp=1)")
    # pyright reports the wrong keyword and the missing argument: two errors on each such line.
    assert errors == sorted(
        [
            ("getting_started.py", stp),
            ("getting_started.py", stp),
            ("wrong.py", line_of(WRONG, "call(stp=1)")),
            ("wrong.py", line_of(WRONG, "call(stp=1)")),
            ("wrong.py", line_of(WRONG, 'call("zero")')),
            ("wrong.py", line_of(WRONG, "wrong: int")),
        ]
    ), json.dumps(report["generalDiagnostics"], indent=1)
