"""The controller's directory: where each proc receives, whether it is alive, who watches it.

It lives on the controller's I/O thread. Procs register when they start
(`Hello`), ask where peers are (`Where`), and ask to be told of losses
(`Watch`). The directory learns of losses from the launchers (a process
exited: noticed at once through a pidfd, by the controller's own launcher or
by the host agent of another host, which reports it with `Exited`) and from
heartbeats: a process that stops answering for ``heartbeat_timeout`` seconds
is declared lost and killed, so it cannot come back as a zombie member of the
job, unless the launcher that started it sees it run. Heartbeats are answered
by Python, and a proc whose code holds the interpreter's lock for seconds (a
long call into C, the import of a large library) cannot answer meanwhile:
such a proc is busy, not lost. Its launcher (this process's own, or the host
agent's on another host, asked with `Check`) tells a running process from one
that is paused, gone, or wedged with every thread asleep, by its state and
the CPU time it uses. Silence is counted on the directory's own clock, in time
its thread was awake to hear answers (`_AwakeClock`): while the controller's
code holds the interpreter, no ping goes out and no answer is read, and its
procs are not to blame.

It also knows which host agent starts each proc (`Hosting`, sent before the
agent is asked to), so that a host that vanishes (its agent killed, its link
down) is reported as the loss of every proc on it, naming the host, and so
that signals for a proc reach the agent that can deliver them.

A proc whose data link with another broke while both live (`Unreachable`: a
connection reset, a message that broke the protocol, a queue pair in error)
cannot go on with it: messages on it may have been lost, and those after them
would wait forever. The directory decides which of the two is lost, the first
report being believed: the other end, unless that is the controller, which
is never the one lost (the reporter is, then). It waits a heartbeat interval
first, for a loss of either to be reported, as one that is ending or ended
causes such a break; then it kills the one it chose and declares it lost, as
it does when heartbeats stop.
"""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from danaus.core.transport import ROOT, ProcLoss
from danaus.transports.tcp import control
from danaus.transports.tcp.ioloop import IoLoop

log = logging.getLogger("danaus.directory")


class _AwakeClock:
    """Seconds the directory's thread has been awake to hear answers: the clock of silences.

    A stretch in which that thread could not run (another thread of this process
    held the interpreter's lock in a long call into C, or the host had no CPU to
    spare) counts for two heartbeat intervals at most: answers that came
    meanwhile are still unread, and no ping went out for procs to answer.
    """

    def __init__(self, interval: float) -> None:
        self._longest_step = 2 * interval
        self._seen = time.monotonic()
        self._now = 0.0

    def now(self) -> float:
        """The clock's time, brought up to date (on the directory's thread only)."""
        real = time.monotonic()
        self._now += min(real - self._seen, self._longest_step)
        self._seen = real
        return self._now

    def peek(self) -> float:
        """The clock's time, left as it is (from any thread)."""
        return self._now + min(time.monotonic() - self._seen, self._longest_step)


@dataclass
class _Entry:
    address: control.Address
    pid: int
    host: str
    last_heard: float
    """When it last answered a heartbeat (`_AwakeClock`), or registered; inf: never asked."""
    busy_since: float | None = None
    """When its launcher first vouched that it runs though it did not answer (None: it answers)."""


class Directory:
    """Addresses and liveness of every proc of the job."""

    def __init__(
        self,
        send: Callable[[str, control.Control], None],
        io: IoLoop,
        *,
        heartbeat_interval: float,
        heartbeat_timeout: float,
        kill: Callable[[str, int], None],
        process_state: Callable[[str], control.ProcessState | None],
    ) -> None:
        self._send = send
        self._io = io
        self._interval = heartbeat_interval
        self._timeout = heartbeat_timeout
        self._clock = _AwakeClock(heartbeat_interval)
        self._kill = kill
        self._process_state = process_state
        """Asks this process's launcher what a proc it started does (None: not its child)."""
        self._entries: dict[str, _Entry] = {}
        self._lookups: dict[str, dict[str, None]] = {}
        self._watchers: dict[str, dict[str, None]] = {}
        self._losses: dict[str, ProcLoss] = {}
        self._on_hello: dict[str, Callable[[], None]] = {}
        self._agent_of: dict[str, str] = {}
        """The host agent that starts each proc (``ROOT``: this process's own launcher)."""
        self._hosted: dict[str, dict[str, None]] = {}
        """The procs each host agent starts, the inverse of ``_agent_of``."""
        self._held: dict[str, list[int]] = {}
        """Signals for procs still starting, sent once each has registered."""
        self._judged: dict[str, str] = {}
        """Procs to be declared lost once the grace after a report of their broken link has
        passed, with why (a report about a proc of these is not believed)."""
        self._ping = 0
        io.call_soon(io.call_later, heartbeat_interval, self._heartbeat)

    def register_local(self, proc: str, address: control.Address, pid: int, host: str) -> None:
        """Enter a proc of this process (it never needs heartbeats)."""
        self._entries[proc] = _Entry(address, pid, host, float("inf"))

    def expect(self, proc: str, on_hello: Callable[[], None]) -> None:
        """Call ``on_hello`` when ``proc`` registers."""
        self._on_hello[proc] = on_hello

    def handle(self, src: str, message: control.Control) -> None:
        if isinstance(message, control.Hello):
            self._hello(src, message)
        elif isinstance(message, control.Where):
            self._lookup(src, message.proc)
        elif isinstance(message, control.Watch):
            self._watch(src, message.proc)
        elif isinstance(message, control.Pong):
            self._answered(src)
        elif isinstance(message, control.Running):
            self._vouched(src, message.proc, message.state)
        elif isinstance(message, control.Hosting):
            self.hosting(message.agent, message.procs)
        elif isinstance(message, control.Exited):
            self._exited(src, message.loss.loss())
        elif isinstance(message, control.Unreachable):
            self.unreachable(src, message.proc, message.link, message.reason)
        else:
            log.error("directory: unexpected %s from %s", type(message).__name__, src)

    def _hello(self, proc: str, hello: control.Hello) -> None:
        if proc in self._losses:
            log.error("directory: %s registered after it was declared lost; ignored", proc)
            return
        self._entries[proc] = _Entry(hello.address, hello.pid, hello.host, self._clock.now())
        for sig in self._held.pop(proc, []):
            self.signal(proc, sig)
        for requester in self._lookups.pop(proc, {}):
            self._send(requester, control.At(proc, hello.address))
        callback = self._on_hello.pop(proc, None)
        if callback is not None:
            callback()

    def _lookup(self, requester: str, proc: str) -> None:
        if proc in self._losses:
            self._send(requester, control.Lost.of(self._losses[proc]))
        elif proc in self._entries:
            self._send(requester, control.At(proc, self._entries[proc].address))
        else:
            self._lookups.setdefault(proc, {})[requester] = None

    def _watch(self, requester: str, proc: str) -> None:
        if proc in self._losses:
            self._send(requester, control.Lost.of(self._losses[proc]))
        else:
            self._watchers.setdefault(proc, {})[requester] = None

    def hosting(self, agent: str, procs: Iterable[str]) -> None:
        """Host agent ``agent`` is to start ``procs``: they are lost with it."""
        hosted = self._hosted.setdefault(agent, {})
        for proc in procs:
            if proc not in self._losses:
                self._agent_of[proc] = agent
                hosted[proc] = None
        if agent in self._losses:
            self._lost_with_host(self._losses[agent])

    def _exited(self, agent: str, loss: ProcLoss) -> None:
        """Host agent ``agent`` saw a proc it started end."""
        known = self._agent_of.get(loss.proc)
        if known is not None and known != agent:
            log.error(
                "directory: %s reported the end of %s, started by %s", agent, loss.proc, known
            )
            return
        self.lost(loss)

    def unreachable(self, reporter: str, suspect: str, link: str, reason: str) -> None:
        """``reporter``'s ``link`` with ``suspect`` broke: after a grace, one of them is lost."""
        if any(proc in self._losses or proc in self._judged for proc in (reporter, suspect)):
            return
        if suspect == ROOT:
            chosen, why = reporter, f"lost its {link} with the controller: {reason}"
        else:
            chosen, why = suspect, f"is unreachable over its {link} from {reporter}: {reason}"
        log.info("directory: %s reports its %s with %s broken: %s", reporter, link, suspect, reason)
        self._judged[chosen] = why
        self._io.call_later(self._interval, lambda: self._declare_unreachable(chosen))

    def _declare_unreachable(self, proc: str) -> None:
        why = self._judged.pop(proc)
        if proc in self._losses:
            return
        log.warning("directory: %s %s; it is declared lost", proc, why)
        entry = self._entries.get(proc)
        self.signal(proc, signal.SIGKILL)
        self.lost(
            ProcLoss(
                proc,
                why,
                host=entry.host if entry is not None else None,
                pid=entry.pid if entry is not None else None,
            )
        )

    def procs_on(self, agent: str) -> list[str]:
        """The live procs host agent ``agent`` started (or is starting)."""
        return list(self._hosted.get(agent, {}))

    def signal(self, proc: str, sig: int) -> None:
        """Send ``sig`` to ``proc``, through the host agent that started it.

        A proc still starting (its agent has it to start, or is starting it) gets
        the signal once it has registered: no launcher could deliver it before, and
        a crash or a pause asked for then must still happen.
        """
        if proc in self._agent_of and proc not in self._entries:
            self._held.setdefault(proc, []).append(sig)
            return
        agent = self._agent_of.get(proc, ROOT)
        if agent == ROOT:
            self._kill(proc, sig)
        else:
            self._send(agent, control.Signal(proc, sig))

    def lost(self, loss: ProcLoss) -> None:
        """``loss.proc`` is gone: tell everyone who watches or looks for it (once).

        If it was a host agent, every proc it started is gone with it.
        """
        if loss.proc in self._losses:
            return
        self._losses[loss.proc] = loss
        self._entries.pop(loss.proc, None)
        self._on_hello.pop(loss.proc, None)
        self._held.pop(loss.proc, None)
        agent = self._agent_of.pop(loss.proc, None)
        if agent is not None:
            self._hosted.get(agent, {}).pop(loss.proc, None)
        notice = control.Lost.of(loss)
        interested = {**self._watchers.pop(loss.proc, {}), **self._lookups.pop(loss.proc, {})}
        for requester in interested:
            if requester not in self._losses:
                self._send(requester, notice)
        self._lost_with_host(loss)

    def _lost_with_host(self, loss: ProcLoss) -> None:
        """Every proc host agent ``loss.proc`` started is lost with it."""
        host = loss.host or loss.proc
        for proc in list(self._hosted.pop(loss.proc, {})):
            entry = self._entries.get(proc)
            self.lost(
                ProcLoss(
                    proc,
                    f"was lost with its host {host} (whose agent {loss.reason})",
                    host=entry.host if entry is not None else loss.host,
                    pid=entry.pid if entry is not None else None,
                )
            )

    def silence(self, proc: str) -> float | None:
        """Seconds ``proc`` has not answered heartbeats, on the directory's clock (None: not
        known, or a proc of this process); from any thread."""
        entry = self._entries.get(proc)
        if entry is None or entry.last_heard == float("inf"):
            return None
        return self._clock.peek() - entry.last_heard

    def live(self, proc: str) -> bool:
        """Whether ``proc`` has registered and is not lost."""
        return proc in self._entries

    def known(self, proc: str) -> bool:
        """Whether ``proc`` has registered (or has been declared lost since)."""
        return proc in self._entries or proc in self._losses

    def address(self, proc: str) -> control.Address | None:
        entry = self._entries.get(proc)
        return entry.address if entry is not None else None

    def _answered(self, proc: str) -> None:
        entry = self._entries.get(proc)
        if entry is None:
            return
        entry.last_heard = self._clock.now()
        if entry.busy_since is not None:
            log.info(
                "directory: %s answers heartbeats again after %.1f s",
                proc,
                entry.last_heard - entry.busy_since + self._timeout,
            )
            entry.busy_since = None

    def _heartbeat(self) -> None:
        now = self._clock.now()
        self._ping += 1
        for proc, entry in list(self._entries.items()):
            if proc in self._losses or entry.last_heard == float("inf"):
                continue
            self._send(proc, control.Ping(self._ping))
            if now - entry.last_heard <= self._timeout:
                continue
            agent = self._agent_of.get(proc)
            host = self._entries.get(agent) if agent is not None else None
            # A host whose agent has been silent for half as long went silent with its
            # procs (its link is down): the loss is the host's, of every proc on it.
            if (
                host is not None
                and host.last_heard != float("inf")
                and (now - host.last_heard > self._timeout / 2)
            ):
                self._silent(agent, host)  # type: ignore[arg-type]
            if proc not in self._losses:
                self._check(proc, entry)
        self._io.call_later(self._interval, self._heartbeat)

    def _check(self, proc: str, entry: _Entry) -> None:
        """``proc`` has not answered for the timeout: ask its launcher whether it runs."""
        agent = self._agent_of.get(proc, ROOT)
        if agent == ROOT:
            self._vouched(ROOT, proc, self._process_state(proc) or "halted")
        else:
            # The answer comes as `Running`; an agent that gives none is silent itself,
            # and then its host is lost with every proc on it.
            self._send(agent, control.Check(proc))

    def _vouched(self, launcher: str, proc: str, state: control.ProcessState) -> None:
        """The launcher of ``proc`` says what its process does."""
        entry = self._entries.get(proc)
        if entry is None or self._clock.now() - entry.last_heard <= self._timeout:
            return
        if self._agent_of.get(proc, ROOT) != launcher:
            log.error("directory: %s vouched for %s, which it did not start", launcher, proc)
            return
        if state == "halted":
            self._silent(proc, entry)
        elif state == "runs" and entry.busy_since is None:
            entry.busy_since = self._clock.now()
            log.warning(
                "directory: %s has not answered heartbeats for %g s, but its process runs: "
                "its code holds the interpreter (a long call into C, a large import?)",
                proc,
                self._timeout,
            )

    def _silent(self, proc: str, entry: _Entry) -> None:
        """``proc`` stopped answering: kill it (it must not come back) and declare it lost."""
        self.signal(proc, signal.SIGKILL)
        self.lost(
            ProcLoss(
                proc,
                f"stopped answering heartbeats for {self._timeout:g} s",
                host=entry.host,
                pid=entry.pid,
            )
        )
