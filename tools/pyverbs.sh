#!/usr/bin/env bash
# Make Debian's pyverbs (rdma-core's Python bindings, which the verbs transport uses on RDMA
# hardware) importable in the virtual environment given as $1, if the system has it (the package
# python3-pyverbs: `make system-deps` installs it; this script installs nothing). The environment
# gets a .pth naming a directory that holds a link to the pyverbs package alone, not the rest of
# the system's packages. Where pyverbs is missing or does not import for this Python, nothing is
# linked, and the tests that need it are skipped.
set -euo pipefail

venv=$1
system=/usr/lib/python3/dist-packages/pyverbs

if [ ! -d "$system" ]; then
    echo "pyverbs is not installed (make system-deps installs it):" \
        "the verbs transport's tests on pyverbs will be skipped"
    exit 0
fi

site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
links="$(cd "$venv" && pwd)/system-pyverbs"
mkdir -p "$links"
ln -sfn "$system" "$links/pyverbs"
echo "$links" > "$site/system-pyverbs.pth"
if ! "$venv/bin/python" -c "import pyverbs.device" 2>/dev/null; then
    echo "Debian's pyverbs does not import for $("$venv/bin/python" -V): not linked"
    rm -f "$site/system-pyverbs.pth"
fi
