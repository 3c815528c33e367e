"""Faults on real processes: signals to procs, and, given control of the machines, the network.

A proc on this host is signalled by the controller's launcher; one on an
attached host, by that host's agent (the directory knows which). Network
faults and whole-machine crashes need a `HostControl` over the workers'
machines, which whoever made them hands to ``configure(host_control=...)``:
with one, partitions and clogs cut the links between the hosts' addresses,
``isolate`` cuts a host off from everyone, and ``crash_host`` makes its
machine die. Without one, those raise `FaultUnsupported` (``crash_host``
kills the host's procs by signals instead). Delays, slow procs and bandwidth
drops always raise it.

The controller counts as running on its own host (``this_host()``, the first
of the job's hosts), as on the simulator: a partition that puts that host on
one side puts the controller there too.
"""

from __future__ import annotations

import signal
from collections.abc import Mapping, Sequence
from functools import partial

from danaus.core.faults import Faults, FaultUnsupported, Heal, HostControl, healing_all
from danaus.transports.tcp.children import Children
from danaus.transports.tcp.directory import Directory
from danaus.transports.tcp.ioloop import IoLoop

CONTROLLED = frozenset(("clog", "partition", "isolate"))
"""The network faults a `HostControl` makes possible (cutting links, not shaping them)."""


class SignalFaults(Faults):
    """SIGKILL, SIGSTOP and SIGCONT to the job's worker processes, on any host.

    The controller signals through its ``directory``; ``machines`` are the
    addresses of the attached hosts' machines, by host agent (a view of the
    world's, which attaching fills), and ``own_machine`` the controller's, which
    runs ``own_host``'s procs. In a host
    agent (no directory), only `workers` answers: the procs of its ``children``.
    """

    def __init__(
        self,
        *,
        io: IoLoop,
        directory: Directory | None,
        children: Children,
        own_proc: str,
        own_host: str,
        own_machine: str,
        machines: Mapping[str, str],
        control: HostControl | None = None,
    ) -> None:
        self._io = io
        self._directory = directory
        self._children = children
        self._own_proc = own_proc
        self._own_host = own_host
        self._own_machine = own_machine
        self._attached = machines
        self._control = control
        self.network_faults = CONTROLLED if control is not None else frozenset()

    def workers(self, host: str) -> list[str]:
        if self._directory is not None:
            return sorted(self._directory.procs_on(host))
        if host == self._own_proc:  # a host agent knows the procs it started
            return sorted(self._children.procs())
        raise RuntimeError("faults are injected from the controller")

    def crash(self, proc: str) -> None:
        self._signal(proc, signal.SIGKILL)

    def pause(self, proc: str) -> Heal:
        self._signal(proc, signal.SIGSTOP)
        return partial(self.resume, proc)

    def resume(self, proc: str) -> None:
        self._signal(proc, signal.SIGCONT)

    def crash_host(self, host: str) -> None:
        if self._control is None:
            super().crash_host(host)
            return
        self._control.crash(self._address(host))

    def clog(self, a: str, b: str) -> Heal:
        return self.partition([a], [b], one_way=False)

    def partition(self, side: Sequence[str], other: Sequence[str], one_way: bool) -> Heal:
        control = self._controlled("a partition")
        ours, theirs = self._machines(side), self._machines(other)
        pairs = [(a, b) for a in ours for b in theirs if a != b]
        if not one_way:
            pairs += [(b, a) for a, b in pairs]
        return healing_all(control.cut(a, b) for a, b in pairs)

    def isolate(self, host: str) -> Heal:
        control = self._controlled("isolating a host")
        address = self._address(host)
        others = [self._own_machine, *self._attached.values()]
        return healing_all(
            control.cut(a, b)
            for other in dict.fromkeys(others)
            if other != address
            for a, b in ((address, other), (other, address))
        )

    def _controlled(self, what: str) -> HostControl:
        if self._control is None:
            raise FaultUnsupported(
                f"{what} needs control of the workers' machines: "
                "configure(host_control=...) gives it"
            )
        return self._control

    def _address(self, host: str) -> str:
        address = self._attached.get(host)
        if address is None:
            raise FaultUnsupported(
                f"host {host} is not an attached worker's: only their machines can be cut off"
            )
        return address

    def _machines(self, hosts: Sequence[str]) -> list[str]:
        """The addresses of ``hosts``, with the controller's beside its own host's."""
        addresses = [self._address(host) for host in hosts]
        if self._own_host in hosts:
            addresses.append(self._own_machine)
        return list(dict.fromkeys(addresses))

    def _signal(self, proc: str, sig: int) -> None:
        if self._directory is None:
            raise RuntimeError("faults are injected from the controller")
        self._io.call_soon(self._directory.signal, proc, sig)
