"""What a world lets a chaos run do to it: the faults real systems suffer.

Each fault that lasts returns a `Heal`, which undoes it. A world applies the
faults it can make happen for real (the simulator: all of them, on its network
model; real transports: crashes and pauses, through the launcher's signals,
and, given a `HostControl` over the machines, partitions, clogs, isolated and
crashed hosts) and raises `FaultUnsupported` for the others, saying why.

Faults of a proc's timing (its clock jumps, its CPU slows down, one of its
actors' threads stops) need a world that owns the proc's clock, its CPU and
its threads' scheduling: the simulator does; a real process's belong to its
operating system.

Targets are hosts (host agent ids, as `World.hosts` gives them) and procs.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence

Heal = Callable[[], None]
"""Undoes the fault that returned it (call it once)."""


def healing_all(heals: Iterable[Heal]) -> Heal:
    """One heal for several faults, undone in the order they were made."""
    done = list(heals)

    def heal() -> None:
        for each in done:
            each()

    return heal


class FaultUnsupported(Exception):
    """This world cannot apply the fault; the message says why."""


class Faults(ABC):
    """Fault injection into one world. `crash`, `pause` and `resume` are thread-safe."""

    network_faults: frozenset[str] = frozenset()
    """Which network faults (of slow, bandwidth, delay, clog, partition, isolate) apply."""
    timing_faults: frozenset[str] = frozenset()
    """Which faults of a proc's timing (of clock_jump, slow_cpu, pause_thread) apply."""

    @abstractmethod
    def workers(self, host: str) -> list[str]:
        """The live procs running user actors on ``host``, in a stable order."""

    @abstractmethod
    def crash(self, proc: str) -> None:
        """Kill ``proc`` at once, as SIGKILL would."""

    @abstractmethod
    def pause(self, proc: str) -> Heal:
        """Freeze ``proc``, as SIGSTOP would; the heal resumes it."""

    @abstractmethod
    def resume(self, proc: str) -> None:
        """Let a paused ``proc`` run again (if it has not been declared lost meanwhile)."""

    def crash_host(self, host: str) -> None:
        """Kill every worker proc of ``host``."""
        procs = self.workers(host)
        if not procs:
            raise FaultUnsupported("no worker procs on that host")
        for proc in procs:
            self.crash(proc)

    def slow(self, proc: str, seconds: float) -> Heal:
        """Every message to or from ``proc`` takes ``seconds`` longer."""
        raise FaultUnsupported(self._no_network("slowing a proc"))

    def bandwidth(self, host: str, factor: float) -> Heal:
        """``host``'s NIC runs at ``factor`` of its bandwidth."""
        raise FaultUnsupported(self._no_network("a bandwidth drop"))

    def delay(self, a: str, b: str, seconds: float) -> Heal:
        """Messages between hosts ``a`` and ``b`` take ``seconds`` longer, with jitter."""
        raise FaultUnsupported(self._no_network("link delay"))

    def clog(self, a: str, b: str) -> Heal:
        """Traffic between hosts ``a`` and ``b`` waits until healed (then arrives, in order)."""
        raise FaultUnsupported(self._no_network("clogging a link"))

    def partition(self, side: Sequence[str], other: Sequence[str], one_way: bool) -> Heal:
        """Cut ``side`` off from ``other`` (only ``side`` -> ``other`` when ``one_way``)."""
        raise FaultUnsupported(self._no_network("a partition"))

    def isolate(self, host: str) -> Heal:
        """Cut ``host`` off from every other host and from the controller, both ways."""
        raise FaultUnsupported(self._no_network("isolating a host"))

    def clock_jump(self, proc: str, seconds: float) -> Heal:
        """``proc``'s clocks jump by ``seconds``, forward or (negative) back, as its code reads
        them: its wall clock by ``seconds``, its monotonic clock forward only (a monotonic clock
        never goes back). The heal sets the wall clock right again; the monotonic one keeps
        its lead."""
        raise FaultUnsupported(
            "a real process reads its machine's clock: stepping it needs root (CAP_SYS_TIME) "
            "and moves every process of the machine, and a clock of one process's own could "
            "only be faked by preloading a library such as libfaketime when it starts"
        )

    def slow_cpu(self, proc: str, factor: float) -> Heal:
        """``proc``'s CPU runs ``factor`` times slower: handling each message takes that much
        longer, one message after another."""
        raise FaultUnsupported(
            "slowing a real process's CPU needs power over its scheduling (a cgroup's cpu.max "
            "quota, or stopping and continuing it in turn), which this world does not have"
        )

    def pause_thread(self, proc: str, actor: int) -> Heal:
        """The thread of actor number ``actor`` (modulo their count, in spawn order) of
        ``proc`` stops until healed, while the rest of the proc (its heartbeats, its other
        actors) goes on."""
        raise FaultUnsupported(
            "one thread of a real process cannot be stopped on its own: SIGSTOP, even sent to "
            "one thread, stops the whole process (that is the pause fault), and only a tracer "
            "attached with ptrace could hold one thread, which Danaus does not make itself"
        )

    def _no_network(self, what: str) -> str:
        return f"{what} needs control of the network, which this world does not have"


class HostControl(ABC):
    """Power over the machines a job's workers run on, and over the network between them.

    A world cannot find out by itself which machines its workers run on or how
    to cut their links: whoever made them (a cluster's operator, a test's
    fixture) hands it one (``configure(host_control=...)``). Machines are named
    by address: a worker's host by the address it listens on, the controller's
    by the address the controller listens on.
    """

    @abstractmethod
    def cut(self, src: str, dst: str) -> Heal:
        """Drop every packet from ``src`` to ``dst`` (addresses), silently, until healed."""

    @abstractmethod
    def crash(self, address: str) -> None:
        """The machine at ``address`` dies: its link goes silent, the job's processes on it end."""
