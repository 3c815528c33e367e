"""Danaus as a package: its version everywhere, its metadata, and a wheel that builds without
warnings and runs the demo in a fresh virtual environment.

The wheel test takes a minute or more (a build, then every dependency installed into a new
environment), so it is marked ``packaging`` and left out of the default run; ``.ci/run`` runs
it on its own (``pytest -m packaging``).
"""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest
import tomllib

import danaus

ROOT = Path(__file__).resolve().parent.parent
TYPED_USE = """
from typing import assert_type

from danaus import Actor, Future, ValueMesh, endpoint, this_host


class Trainer(Actor):
    @endpoint
    def train(self, step: int) -> str:
        return str(step)


trainers = this_host().spawn_procs().spawn("trainers", Trainer)
assert_type(trainers.train.call(step=0), Future[ValueMesh[str]])
"""
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_the_version_is_the_same_everywhere():
    assert danaus.__version__ == importlib.metadata.version("danaus")
    script = Path(sys.executable).parent / "danaus"
    for command in ([sys.executable, "-m", "danaus"], [str(script)]):
        shown = subprocess.run(
            [*command, "--version"], capture_output=True, text=True, timeout=60, check=True
        )
        assert shown.stdout == f"danaus {danaus.__version__}\n"


def test_python_dash_m_danaus_is_the_command():
    shown = subprocess.run(
        [sys.executable, "-m", "danaus", "--help"], capture_output=True, text=True, timeout=60
    )
    assert shown.returncode == 0
    assert shown.stdout.startswith("usage: danaus ")


def test_the_metadata_names_its_license_file_classifiers_and_typing():
    assert PYPROJECT["license"] == "BSD-3-Clause"
    assert PYPROJECT["license-files"] == ["LICENSE"]
    assert (ROOT / "LICENSE").read_text().startswith("BSD 3-Clause License\n")
    classifiers = PYPROJECT["classifiers"]
    assert "Typing :: Typed" in classifiers
    assert not [c for c in classifiers if c.startswith("License ::")]  # the expression says it
    assert "Programming Language :: Python :: 3.10" in classifiers
    assert (ROOT / "danaus" / "py.typed").exists()
    for page in ("CHANGELOG.md", "CONTRIBUTING.md"):
        assert (ROOT / page).read_text().startswith("# ")
    assert f"## {danaus.__version__}" in (ROOT / "CHANGELOG.md").read_text()


def test_build_outputs_are_ignored_by_git():
    paths = ["build/lib/danaus/cli.py", "dist/danaus-0.1.0.tar.gz", "test-artifacts/a.png"]
    ignored = subprocess.run(
        ["git", "check-ignore", *paths], cwd=ROOT, capture_output=True, text=True
    )
    assert ignored.stdout.split() == paths


@pytest.mark.packaging
def test_the_wheel_builds_without_warnings_and_runs_the_demo_in_a_fresh_venv(tmp_path):
    # Byte-compiling is part of a normal build; with it switched off setuptools warns so.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    built = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(tmp_path / "dist")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    output = built.stdout + built.stderr
    assert "warning" not in output.lower(), output
    (wheel,) = (tmp_path / "dist").glob("danaus-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = archive.read(f"danaus-{danaus.__version__}.dist-info/METADATA").decode()
    assert "danaus/py.typed" in names
    assert f"danaus-{danaus.__version__}.dist-info/licenses/LICENSE" in names
    assert "License-Expression: BSD-3-Clause" in metadata

    fresh = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(fresh)
    python = fresh / "bin" / "python"
    installed = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", str(wheel)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert installed.returncode == 0, installed.stderr
    # Run from elsewhere than the checkout, so that only the installed package can be imported.
    demo = subprocess.run(
        [str(python), str(ROOT / "examples" / "getting_started.py")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert demo.returncode == 0, demo.stderr
    assert "trainer gpus=5 of the first host did 4 steps" in demo.stdout
    located = subprocess.run(
        [str(python), "-c", "import danaus, torch"], cwd=tmp_path, capture_output=True, text=True
    )
    assert "No module named 'torch'" in located.stderr  # the package alone, nothing else
    # py.typed: mypy finds the installed package, and its types.
    (tmp_path / "uses.py").write_text(TYPED_USE)
    checked = subprocess.run(
        [str(Path(sys.executable).parent / "mypy"), "--python-executable", str(python), "uses.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert checked.returncode == 0, checked.stdout
    version = subprocess.run(
        [str(fresh / "bin" / "danaus"), "--version"], capture_output=True, text=True, timeout=60
    )
    assert version.stdout == f"danaus {danaus.__version__}\n"
