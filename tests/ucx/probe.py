"""An actor that takes payloads and tells whether UCX started in its process.

Kept apart from the tests that use it: importing it needs no ``ucxx``.
"""

from __future__ import annotations

import threading

from danaus import Actor, endpoint


class Probe(Actor):
    @endpoint
    def take(self, payload: bytes) -> int:
        return len(payload)

    @endpoint
    def ucx_started(self) -> bool:
        return any(thread.name == "danaus-ucx" for thread in threading.enumerate())
