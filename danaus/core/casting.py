"""Casts along a fan-out tree: a cast to many procs costs its sender only a few sends.

A cast to more procs than the world's fan-out F (``cast_fanout``) leaves its
sender as at most F messages. The targets are split into F runs; the first
proc of each run gets the call with the rest of its run to pass on, which it
splits the same way, and so on down. Every proc on the way hands the call to
its own actor too, and every answer goes straight to the caller's port. A
cast to at most F procs goes straight to each, as any call does.

Nobody may miss a call because a proc on its way was lost, so someone keeps
each call until it has reached every proc it was for:

* A call whose answers the caller gathers (``call``, ``stream``,
  ``Accumulator``) is kept by the caller until every answer is in: an answer
  says its proc has the call. The procs that pass it on keep nothing. When a
  proc of the tree is lost, the caller sends the call again to the procs of
  the lost proc's part of the tree that have not answered (`Answered`).
* Any other cast (``broadcast``, or answers to a port of one's own) is kept
  hop by hop: a proc that passes it on keeps it until the proc it sent it to
  acknowledges (`Ack`) that every proc of its part has it; acknowledgements
  climb the tree, each covering what a few milliseconds brought. If that proc
  is lost first, the sender passes its part on itself (`Relays.lost`).

Either way a proc may get a call twice, and calls from one proc to another
may arrive out of order when they took different paths: `danaus.core.ordering`
drops the second copy and puts them back in order. Every transport kills a
proc it declares lost, so a proc reported lost is gone for good and each part
of a tree is sent again at most once per lost proc; every hop names fewer
procs than the one before, so forwarding ends.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections.abc import Callable, Mapping, Sequence, Set
from typing import TYPE_CHECKING, Any, Protocol

from msgspec.structs import replace

from danaus.core import trace as ev
from danaus.core.serialize import Buffer
from danaus.core.wire import MAX_ACKS, Ack, Call, Cast, Envelope

if TYPE_CHECKING:
    from danaus.core.ports import ReplyHandler
    from danaus.core.trace import Trace
    from danaus.core.transport import ProcLoss

SUBTREE_BYTES = 16 * 1024
"""About how many bytes of proc names one forwarded cast may carry (a quarter of a header)."""
ENTRY_BYTES = 16
"""What naming one proc costs a cast's header beyond the proc id: its point and number."""
ACK_DELAY = 0.005
"""Seconds (of the world's clock) a proc gathers hops before it acknowledges them, so that
one message acknowledges the hops of many casts; a sender keeps a call that much longer."""
ACK_PAYLOAD: tuple[Buffer, ...] = (b"\0",)
"""Every message carries a payload frame; an acknowledgement's says nothing."""


class Targets:
    """The procs a call is for: each with its point in the slice and its number from the origin."""

    __slots__ = ("points", "procs", "seqs")

    def __init__(self, procs: Sequence[str], points: Sequence[int], seqs: Sequence[int]) -> None:
        self.procs = tuple(procs)
        self.points = tuple(points)
        self.seqs = tuple(seqs)

    def __len__(self) -> int:
        return len(self.procs)

    def part(self, start: int, stop: int) -> Targets:
        return Targets(self.procs[start:stop], self.points[start:stop], self.seqs[start:stop])

    def without(self, gone: Set[str]) -> Targets:
        """These targets but those whose proc is in ``gone``."""
        if gone.isdisjoint(self.procs):
            return self
        keep = [i for i, proc in enumerate(self.procs) if proc not in gone]
        procs, points, seqs = self.procs, self.points, self.seqs
        return Targets([procs[i] for i in keep], [points[i] for i in keep], [seqs[i] for i in keep])


def split(targets: Targets, fanout: int) -> list[tuple[int, int]]:
    """Runs ``(start, stop)`` of ``targets``: ``fanout`` of nearly equal length (fewer if there
    are fewer targets, more if a run would name more procs than a header can carry)."""
    count = len(targets)
    if not count:
        return []
    size = sum(map(len, targets.procs)) + ENTRY_BYTES * count
    runs = min(count, max(fanout, -(-size // SUBTREE_BYTES)))
    base, longer = divmod(count, runs)
    bounds = []
    start = 0
    for run in range(runs):
        stop = start + base + (run < longer)
        bounds.append((start, stop))
        start = stop
    return bounds


def part_of(targets: Targets, fanout: int, proc: str) -> Targets | None:
    """The procs ``proc`` passes a call on to in the tree of ``targets`` (None: not in it).

    Every proc splits what it is given as `split` does, so the tree follows
    from ``targets`` and ``fanout`` alone.
    """
    while targets:
        for start, stop in split(targets, fanout):
            if targets.procs[start] == proc:
                return targets.part(start + 1, stop)
            if proc in targets.procs[start + 1 : stop]:
                targets = targets.part(start + 1, stop)
                break
        else:
            return None
    return None


class Answered:
    """A cast its caller keeps until every answer is in (held by the handler of its answers).

    ``trees`` are the targets it was sent along, first as cast, then each part
    sent again after a loss: where a lost proc sat in each is what it kept
    from the procs below it. ``pending`` are the points yet to answer.
    """

    __slots__ = ("call", "fanout", "payload", "pending", "trees")

    def __init__(self, call: Call, payload: list[Buffer], fanout: int, first: Targets) -> None:
        self.call = call
        self.payload = payload
        self.fanout = fanout
        self.trees = [first]
        self.pending = set(first.points)


class _Relay:
    """A call this proc sends or passes on hop by hop, kept until every part has it."""

    __slots__ = ("call", "fanout", "origin", "parent", "payload", "waiting")

    def __init__(
        self,
        call: Call,
        payload: list[Buffer],
        origin: str,
        fanout: int,
        parent: tuple[str, int] | None,
    ) -> None:
        self.call = call
        self.payload = payload
        self.origin = origin
        self.fanout = fanout
        self.parent = parent
        """The proc it came from and its hop, to acknowledge when done; None at the origin."""
        self.waiting = 0
        """Hops not yet acknowledged, plus one while it is being sent."""


class Sender(Protocol):
    def send_message(self, dest: str, envelope: Envelope, payload: Sequence[Buffer]) -> None: ...


class RelayingProc(Protocol):
    """What relaying casts needs of its proc's runtime."""

    @property
    def proc_id(self) -> str: ...

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...

    @property
    def trace(self) -> Trace: ...

    @property
    def transport(self) -> Sender: ...

    @property
    def lost_procs(self) -> Mapping[str, ProcLoss]: ...

    def is_lost(self, proc: str) -> bool: ...

    def watch(self, proc: str) -> None: ...

    def on_loop(self, fn: Callable[..., Any], *args: Any) -> None: ...


class Relays:
    """The calls a proc sends along trees or passes on, and those it keeps.

    `cast` may be called from any thread; the rest runs on the runtime's loop
    thread. A lock guards what both touch: the hops awaiting acknowledgement.
    """

    __slots__ = ("_acks_due", "_by_child", "_hops", "_lock", "_runtime", "_unacked")

    def __init__(self, runtime: RelayingProc) -> None:
        self._runtime = runtime
        self._lock = threading.Lock()
        self._hops = itertools.count()
        self._unacked: dict[int, tuple[_Relay, str, Targets]] = {}
        """Each hop not yet acknowledged: its call, the proc it went to, and that proc's part."""
        self._by_child: dict[str, dict[int, None]] = {}
        """The hops not yet acknowledged, by the proc they went to."""
        self._acks_due: dict[str, list[int]] = {}
        """Hops to acknowledge once ``ACK_DELAY`` has passed, by the proc they came from."""

    def cast(
        self,
        call: Call,
        payload: list[Buffer],
        fanout: int,
        targets: Targets,
        answers: ReplyHandler | None,
    ) -> None:
        """Send ``call`` to ``targets`` along a tree (each with its own point and number).

        ``answers``: the handler gathering the call's answers here, which then
        keeps the call (`Answered`); None: the call is kept hop by hop.
        """
        runtime = self._runtime
        if answers is None:
            self._run(_Relay(call, payload, runtime.proc_id, fanout, None), targets)
            return
        targets = targets.without(runtime.lost_procs.keys())
        answers.cast = Answered(call, payload, fanout, targets)
        self._pass_on(call, payload, runtime.proc_id, fanout, targets, first=True)
        if not runtime.lost_procs.keys().isdisjoint(targets.procs):
            runtime.on_loop(self._lost_meanwhile, answers)  # lost since it was left out

    def forward(self, src: str, cast: Cast, payload: list[Buffer]) -> None:
        """Pass ``cast``, which came from proc ``src``, on to its part of the tree."""
        targets = Targets(cast.procs, cast.points, cast.seqs)
        if not cast.ack:
            self._pass_on(cast.call, payload, cast.origin, cast.fanout, targets, first=False)
            return
        parent = (src, cast.hop)
        if not cast.procs:
            self._acknowledge(parent)
            return
        self._run(_Relay(cast.call, payload, cast.origin, cast.fanout, parent), targets)

    def resend(self, answered: Answered, lost: str) -> None:
        """``lost`` is gone: send ``answered`` again to the procs below it in its trees that
        have yet to answer."""
        runtime = self._runtime
        gone = runtime.lost_procs.keys()
        pending = answered.pending
        for tree in list(answered.trees):
            part = part_of(tree, answered.fanout, lost)
            if not part:
                continue
            keep = [i for i, point in enumerate(part.points) if point in pending]
            again = Targets(
                [part.procs[i] for i in keep],
                [part.points[i] for i in keep],
                [part.seqs[i] for i in keep],
            ).without(gone)
            if not again:
                continue
            answered.trees.append(again)
            runtime.trace.record(ev.Adopted(proc=runtime.proc_id, lost=lost, hops=1))
            call, payload = answered.call, answered.payload
            self._pass_on(call, payload, runtime.proc_id, answered.fanout, again, first=True)

    def _lost_meanwhile(self, answers: ReplyHandler) -> None:
        """Procs of a cast's tree were lost while it was sent: send their parts again."""
        answered = answers.cast
        if answered is None:
            return
        for proc in [p for p in answered.trees[0].procs if self._runtime.is_lost(p)]:
            self.resend(answered, proc)

    def _pass_on(
        self,
        call: Call,
        payload: list[Buffer],
        origin: str,
        fanout: int,
        targets: Targets,
        first: bool,
    ) -> None:
        """Send a call its caller keeps to ``targets``, keeping nothing here: the first proc
        of each run gets a `Cast` naming the rest of its run, or a plain call (naming the
        caller's proc) if it is alone. ``first``: this proc is the caller, whose plain calls
        are sends, not forwards, in the trace."""
        runtime = self._runtime
        trace = runtime.trace
        for start, stop in split(targets, fanout):
            child = targets.procs[start]
            point, seq = targets.points[start], targets.seqs[start]
            envelope: Call | Cast
            if stop - start > 1:
                head = replace(call, point=point, seq=seq)
                part = targets.part(start + 1, stop)
                envelope = Cast(
                    head, origin, 0, fanout, part.procs, part.points, part.seqs, ack=False
                )
            elif first:
                head = envelope = replace(call, point=point, seq=seq)
            else:
                head = envelope = replace(call, point=point, seq=seq, origin=origin)
            if trace.enabled and not (first and stop - start == 1):
                trace.events.append(
                    ev.Forwarded(
                        t=trace.clock(),
                        proc=runtime.proc_id,
                        src=head.sender,
                        seq=head.seq,
                        to=child,
                        hop=None,
                        procs=stop - start,
                    )
                )
            runtime.transport.send_message(child, envelope, payload)

    def rejected(self, src: str, hop: int) -> None:
        """A cast that came from ``src`` as ``hop`` was unreadable: nothing will come of it, so
        ``src`` may drop it."""
        self._acknowledge((src, hop))

    def acked(self, src: str, ack: Ack) -> None:
        """Proc ``src`` has passed on the hops ``ack`` names (to every proc they were for)."""
        done = []
        with self._lock:
            for hop in ack.hops:
                entry = self._unacked.get(hop)
                if entry is None or entry[1] != src:
                    continue
                del self._unacked[hop]
                children = self._by_child[src]
                del children[hop]
                if not children:
                    del self._by_child[src]
                relay = entry[0]
                relay.waiting -= 1
                if relay.waiting == 0:
                    done.append(relay)
        for relay in done:
            self._finish(relay)

    def lost(self, proc: str) -> None:
        """``proc`` is gone: pass on what it had not acknowledged, and acknowledge nothing to it."""
        self._acks_due.pop(proc, None)
        with self._lock:
            hops = self._by_child.pop(proc, {})
            orphans = [self._unacked.pop(hop) for hop in hops]
        if not orphans:
            return
        runtime = self._runtime
        runtime.trace.record(ev.Adopted(proc=runtime.proc_id, lost=proc, hops=len(orphans)))
        for relay, _, part in orphans:
            self._send(relay, part)
            self._release(relay)

    def close(self) -> None:
        """The proc is shutting down: nothing more is sent."""
        self._acks_due.clear()
        with self._lock:
            self._unacked.clear()
            self._by_child.clear()

    def _run(self, relay: _Relay, targets: Targets) -> None:
        relay.waiting = 1
        self._send(relay, targets)
        self._release(relay)

    def _release(self, relay: _Relay) -> None:
        """One thing ``relay`` waited for is over: finish it if nothing else is left."""
        with self._lock:
            relay.waiting -= 1
            done = relay.waiting == 0
        if done:
            self._finish(relay)

    def _finish(self, relay: _Relay) -> None:
        if relay.parent is not None:
            self._acknowledge(relay.parent)

    def _send(self, relay: _Relay, targets: Targets) -> None:
        """Send ``relay``'s call to ``targets`` hop by hop: one message per run, for its first
        proc to pass on to the rest. The origin sends a run of one proc a plain call: there is
        no one else that proc's loss could keep the call from."""
        runtime = self._runtime
        targets = targets.without(runtime.lost_procs.keys())
        if not targets:
            return
        trace = runtime.trace
        orphaned = []
        for start, stop in split(targets, relay.fanout):
            child = targets.procs[start]
            call = replace(relay.call, point=targets.points[start], seq=targets.seqs[start])
            if relay.parent is None and stop - start == 1:
                runtime.transport.send_message(child, call, relay.payload)
                continue
            hop = next(self._hops)
            part = targets.part(start + 1, stop)
            cast = Cast(call, relay.origin, hop, relay.fanout, part.procs, part.points, part.seqs)
            # Checked and recorded at once: a loss reported between the two would find no hop
            # to take back, and the part would wait for an acknowledgement that never comes.
            with self._lock:
                if runtime.is_lost(child):
                    orphaned.append(part)
                    continue
                self._unacked[hop] = (relay, child, part)
                self._by_child.setdefault(child, {})[hop] = None
                relay.waiting += 1
            if child != runtime.proc_id:
                runtime.watch(child)
            if trace.enabled:
                trace.events.append(
                    ev.Forwarded(
                        t=trace.clock(),
                        proc=runtime.proc_id,
                        src=call.sender,
                        seq=call.seq,
                        to=child,
                        hop=hop,
                        procs=stop - start,
                    )
                )
            runtime.transport.send_message(child, cast, relay.payload)
        for part in orphaned:
            self._send(relay, part)

    def _acknowledge(self, parent: tuple[str, int]) -> None:
        """Acknowledge hop ``parent[1]`` to proc ``parent[0]``, with others due by then."""
        proc, hop = parent
        if self._runtime.is_lost(proc):
            return
        if not self._acks_due:
            self._runtime.loop.call_later(ACK_DELAY, self._flush)
        self._acks_due.setdefault(proc, []).append(hop)

    def _flush(self) -> None:
        due, self._acks_due = self._acks_due, {}
        send = self._runtime.transport.send_message
        for proc, hops in due.items():
            for start in range(0, len(hops), MAX_ACKS):
                send(proc, Ack(tuple(hops[start : start + MAX_ACKS])), ACK_PAYLOAD)
