"""A proc's peers: where each receives, what waits until that is known, and which are lost.

A proc learns where a peer receives from the controller's directory (its
control address and its data address together). Until it knows, what it sends
to the peer waits here: control messages (sent by the I/O thread once the
address comes) and data messages (sent by the data plane, in the order they
were sent). Whoever holds the first message for a peer asks the directory, so
it is asked once. One `Peers` per proc serves both planes: the control plane
on the I/O thread, the data plane from whichever thread sends.

A data plane that has a connection to a peer sends on it without asking here;
it asks only before its first message to the peer. So that no message overtakes
one that waited, the data address is given out only once nothing waits for it
(`data_address`); what waited is taken by the plane in one piece
(`take_data`), under the plane's own lock, which it holds around both calls
(the plane's lock, then this one's: never the other way).
"""

from __future__ import annotations

import threading
from typing import Any

from danaus.core.transport import ProcLoss
from danaus.transports.tcp import control


class Peers:
    """The peers of one proc. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._addresses: dict[str, control.Address] = {}
        self._control: dict[str, list[list[Any]]] = {}
        """Control messages waiting for each peer's address (kind frame first)."""
        self._data: dict[str, list[list[Any]]] = {}
        """Data messages waiting for each peer's address, in the order sent."""
        self.lost: dict[str, ProcLoss] = {}
        """The peers known to be lost, with why (written on the I/O thread, read anywhere)."""

    def address(self, peer: str) -> control.Address | None:
        """Where ``peer`` receives, if known."""
        return self._addresses.get(peer)

    def data_address(self, peer: str) -> str | None:
        """Where ``peer`` receives data, once known and once nothing waits to go there first
        (None for a lost peer: nothing is sent to it any more)."""
        with self._lock:
            if peer in self._data or peer in self.lost:
                return None
            address = self._addresses.get(peer)
        return None if address is None else address.data

    def hold_control(self, peer: str, message: list[Any]) -> bool:
        """Keep ``message`` until ``peer``'s address is known; True if the directory is to be
        asked where it is (nothing waited for it before)."""
        with self._lock:
            return self._hold(self._control, peer, message)

    def hold_data(self, peer: str, message: list[Any]) -> bool:
        """Keep data ``message`` after those waiting for ``peer`` (dropped if the peer is lost);
        True if the directory is to be asked where it is."""
        with self._lock:
            if peer in self.lost:
                return False
            return self._hold(self._data, peer, message) and peer not in self._addresses

    def _hold(self, waiting: dict[str, list[list[Any]]], peer: str, message: list[Any]) -> bool:
        first = peer not in self._control and peer not in self._data
        waiting.setdefault(peer, []).append(message)
        return first

    def learn(self, peer: str, address: control.Address) -> list[list[Any]]:
        """``peer`` receives at ``address``: the control messages that waited for it."""
        with self._lock:
            self._addresses[peer] = address
            return self._control.pop(peer, [])

    def take_data(self, peer: str) -> tuple[str, list[list[Any]]] | None:
        """``peer``'s data address and the data messages that waited for it, once it is known
        (None before, or if none waited)."""
        with self._lock:
            address = self._addresses.get(peer)
            if address is None or peer not in self._data:
                return None
            return address.data, self._data.pop(peer)

    def waiting_data(self) -> bool:
        """Whether data messages wait for an address."""
        return bool(self._data)

    def lose(self, loss: ProcLoss) -> bool:
        """``loss.proc`` is gone: what waits for it is dropped. False if it was known lost."""
        with self._lock:
            if loss.proc in self.lost:
                return False
            self.lost[loss.proc] = loss
            self._control.pop(loss.proc, None)
            self._data.pop(loss.proc, None)
            return True
