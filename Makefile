# Everything runs from a virtual environment in .venv, made with the system's python3.
# `make demo` installs the package alone; `make install`, `make test`, `make docs` and
# `make lint` install everything the test suite and the docs need. Each installation is
# redone whenever pyproject.toml changes. Nothing here changes the system but
# `make system-deps`, which installs (as root, with apt-get) the Debian packages the test
# suite needs, and says so.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PACKAGE_STAMP := $(VENV)/.installed-package

.PHONY: install system-deps demo test docs lint clean

install: $(STAMP)

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# The demo needs the package and its dependencies only (no torch, ucx, test or docs tools).
$(PACKAGE_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -e .
	touch $@

# torch is pinned and installed on its own, before the package and its extras. pyverbs, for the
# verbs transport on RDMA hardware, comes from the system: linked here if it is there
# (tools/pyverbs.sh; `make system-deps` installs it). The ucx
# transport's one-sided RDMA library is compiled into the user's cache now rather than by its
# first user; if it cannot be, ucx falls back to served transfers and says why.
$(STAMP): pyproject.toml tools/pyverbs.sh | $(BIN)/python
	$(BIN)/pip install torch==2.13.0 numpy
	$(BIN)/pip install -e ".[test,docs,ucx]"
	bash tools/pyverbs.sh $(VENV)
	$(BIN)/python -m danaus.transports.ucx.rma_build || true
	touch $@ $(PACKAGE_STAMP)

system-deps:
	bash tools/system-deps.sh

demo: $(PACKAGE_STAMP)
	$(BIN)/python examples/getting_started.py

# The suite starts hundreds of interpreters: each reuses the bytecode the first one wrote,
# even where the environment says not to write it (an empty value turns that off). Two
# pytest workers: most tests wait on other processes, so two keep the machine's cores busy;
# the tests that share a session's cluster stay in one worker (tests/conftest.py).
test: install
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -n 2 --dist loadgroup

docs: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

lint: install
	$(BIN)/ruff check .

clean:
	rm -rf site build dist .pytest_cache .ruff_cache
