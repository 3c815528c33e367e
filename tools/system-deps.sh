#!/usr/bin/env bash
# The Debian packages the test suite needs from the system, installed as root with apt-get
# (`make system-deps`). It prints what it installs before it does, and installs nothing else:
#
#   chromium          the browser the dashboard's browser tests drive headless (with Playwright)
#   python3-pyverbs   rdma-core's Python bindings, for the verbs transport on RDMA hardware
#                     (`make install` links it into the virtual environment: tools/pyverbs.sh)
#   slurm-wlm munge   a SLURM cluster on this host, for the tests of SLURM jobs
#                     (tools/slurm-cluster.sh starts it)
#
# Packages already installed are left alone; the package lists are refreshed only if an
# installation fails without it.
set -euo pipefail

packages=(chromium python3-pyverbs slurm-wlm munge)

missing=()
for package in "${packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$package")
    fi
done
if [ ${#missing[@]} -eq 0 ]; then
    echo "system-deps: already installed: ${packages[*]}"
    exit 0
fi
echo "system-deps: installing Debian packages: ${missing[*]}"
if [ "$(id -u)" != 0 ]; then
    echo "system-deps: run it as root (sudo make system-deps), or install them yourself" >&2
    exit 1
fi
if ! command -v apt-get >/dev/null; then
    echo "system-deps: no apt-get here: install ${missing[*]} with this system's packages" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get install -y --no-install-recommends "${missing[@]}" ||
    { apt-get update && apt-get install -y --no-install-recommends "${missing[@]}"; }
