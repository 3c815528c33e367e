"""The system's Chromium as the dashboard's browser tests and its benchmark start it.

Headless, without a sandbox (the tests run as root), and with every feature off
that would reach the network or spend CPU behind the page's back (updates,
sync, QUIC probes), so that the browser touches loopback only and its cost is
the page's.
"""

CHROMIUM = "/usr/bin/chromium"
"""Debian's package (`make system-deps` installs it)."""
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
