"""Incremental construction of the prefix-closed Lamport timeline (Mallory, Algorithm 2).

Observers send each node's events in batches that may arrive out of order, and a packet's
RECV may reach us before its SEND. The builder commits events only in a causally closed
prefix (a consistent cut): an event is committed after every event before it on its node
and, for a RECV, after the SEND it receives. So whatever the arrival order, the committed
timeline is the same one an offline build over the complete execution gives.

How a RECV is resolved: the SEND with the same packet id is looked up among committed
SENDs (link it) and among received-but-uncommitted SENDs (wait for it). If neither has it,
the RECV may be for a packet whose SEND is still on its way to us, or for a packet no
observer sent (a client outside the cluster, a lost observer event). Clocks of different
nodes disagree by at most `skew_ns`, so once every other node's stream is complete up to
the RECV's time plus the skew bound, a SEND can no longer appear: the RECV commits with no
cross-node predecessor. A SEND commits at once; it points to a pending target (its `recvs`
list) that is filled in when RECVs commit (several, if the packet was duplicated).

Times: each node sends a `ClockPair`; the builder maps node monotonic timestamps onto the
common real-time axis with it. A node's events wait until its clock pair has arrived.

Memory: committed entries are handed out by `drain()` and not kept; the table of committed
SENDs (needed for late RECVs) forgets SENDs older than `link_timeout_ns` behind the frontier,
and beyond the newest `max_sends` whatever their age: at a high packet rate the time bound
alone held rate x 30 s of entries (~450 B each). A RECV whose SEND was forgotten commits
unmatched once no SEND can appear (see above), as one does after the timeout.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from mallory.errors import MalloryError
from mallory.timeline.event import Batch, ClockPair, Event, Kind

_SEND = Kind.SEND
_RECV = Kind.RECV
#: Committed SENDs remembered at most for RECVs still to come (~500 B each with their event:
#: ~16 MB). A RECV normally reaches the builder within a batch interval or two of its SEND;
#: at ~1,000 SENDs/s (a 6,000 events/s stream, 1 in 6 a SEND) this is more than the 30 s
#: link timeout, so the count binds only at higher rates, where it keeps ~10 s or more.
MAX_SENDS = 32_768


class Committed:
    """One event placed in the timeline.

    lamport: its Lamport timestamp; index: its position on its node (0, 1, ...).
    send:    for a RECV, the committed SEND it receives, or None if it has none.
    recvs:   for a SEND, (node, index) of the RECVs committed so far that receive it (the
             pending target). Positions, not entries: an entry pointing back at the SEND
             would make a reference cycle per message, which only the cyclic garbage
             collector can free; without cycles a released window is freed at once.
    """

    __slots__ = ("event", "real_ns", "lamport", "index", "send", "recvs")

    def __init__(self, event: Event, real_ns: int, lamport: int, index: int, send: Committed | None) -> None:
        self.event = event
        self.real_ns = real_ns
        self.lamport = lamport
        self.index = index
        self.send = send
        self.recvs: list[tuple[str, int]] | None = [] if event.kind is _SEND else None

    def __repr__(self) -> str:
        e = self.event
        link = f" <- {self.send.event.node}#{self.send.index}" if self.send is not None else ""
        return f"<{e.node}#{self.index} {e.kind.name} L={self.lamport}{link}>"


class BatchRejected(MalloryError):
    """A batch that contradicts what the builder already holds."""


@dataclass
class _NodeStream:
    name: str
    clock: ClockPair | None = None
    next_seq: int = 0
    early: dict[int, Batch] = field(default_factory=dict)  # batches waiting for a gap to fill
    unclocked: list[Batch] = field(default_factory=list)  # contiguous, waiting for the clock pair
    queue: deque = field(default_factory=deque)  # contiguous events not yet committed
    horizon_mono: int = -1  # stream complete up to this monotonic time
    lamport: int = 0
    committed: int = 0
    lost: int = 0

    def horizon_real(self) -> int | None:
        if self.clock is None or self.horizon_mono < 0:
            return None
        return self.horizon_mono - self.clock.mono_ns + self.clock.real_ns


class TimelineBuilder:
    """Builds the committed, causally closed prefix of the timeline from per-node batches.

    nodes: the cluster's node names. A RECV without a SEND waits until every one of them is
    complete past its time. Without `nodes`, membership is whatever nodes have been heard
    from so far, which is only sound if each node's clock pair arrives before any other
    node's events (true of a live campaign, where observers start before the SUT); a RECV
    could otherwise be declared unmatched before its sender was ever heard of.
    """

    def __init__(
        self,
        skew_ns: int = 100_000_000,
        link_timeout_ns: int = 30_000_000_000,
        nodes: list[str] | None = None,
        max_sends: int = MAX_SENDS,
    ) -> None:
        if skew_ns < 0 or link_timeout_ns < 0:
            raise ValueError("skew_ns and link_timeout_ns must be non-negative")
        if max_sends < 1:
            raise ValueError("max_sends must be at least 1")
        self.skew_ns = skew_ns
        self.link_timeout_ns = link_timeout_ns
        self.max_sends = max_sends
        self._streams: dict[str, _NodeStream] = {}
        self._fixed_nodes = nodes is not None
        for name in nodes or ():
            self._streams[name] = _NodeStream(name)
        self._sends: dict[int, Committed] = {}  # packet id -> committed SEND
        self._send_order: deque[Committed] = deque()  # for forgetting old SENDs
        self._queued_sends: dict[int, int] = {}  # packet id -> SENDs received, not committed
        self._waiting: dict[int, list[_NodeStream]] = {}  # packet id -> nodes blocked on it
        self._out: list[Committed] = []
        self.unmatched_recvs = 0
        self.duplicate_batches = 0
        self.committed_total = 0

    # -- input ---------------------------------------------------------------------------

    def add_clock(self, pair: ClockPair) -> None:
        stream = self._stream(pair.node)
        first = stream.clock is None
        stream.clock = pair
        if first and stream.unclocked:
            for batch in stream.unclocked:
                self._enqueue(stream, batch)
            stream.unclocked.clear()
            self._pump_all()

    def add_batch(self, batch: Batch) -> None:
        """Take one batch, in any order; commits whatever becomes committable."""
        stream = self._stream(batch.node)
        if batch.seq < stream.next_seq or batch.seq in stream.early:
            self.duplicate_batches += 1
            return
        stream.early[batch.seq] = batch
        progressed = False
        while stream.next_seq in stream.early:
            ready = stream.early.pop(stream.next_seq)
            stream.next_seq += 1
            if stream.clock is None:
                stream.unclocked.append(ready)
            else:
                self._enqueue(stream, ready)
                progressed = True
        if progressed:
            self._drive([stream])
            self._pump_blocked()

    def add_event(self, event: Event) -> None:
        """A single event outside any batch: it is its node's next batch of one."""
        stream = self._stream(event.node)
        self.add_batch(Batch(event.node, stream.next_seq + len(stream.early), event.ts, [event]))

    def finish(self) -> None:
        """Declare every stream complete: waiting RECVs whose SEND never came commit unmatched."""
        for stream in self._streams.values():
            if stream.clock is None and stream.unclocked:
                raise BatchRejected(f"node {stream.name} sent events but never a clock pair")
            stream.horizon_mono = 2**63 - 1
        self._pump_all()
        stuck = [s.name for s in self._streams.values() if s.queue]
        if stuck:
            raise BatchRejected(f"causal cycle in the input: nodes {stuck} cannot commit")

    # -- output --------------------------------------------------------------------------

    def drain(self) -> list[Committed]:
        """The entries committed since the last call, in commit order (a causal order)."""
        out, self._out = self._out, []
        return out

    @property
    def frontier_ns(self) -> int | None:
        """Common-axis time before which every event is committed (or None before any data).

        An event not yet received has a time at or after its node's horizon; an event received
        but not committed is in its node's queue.
        """
        low = None
        for stream in self._streams.values():
            if stream.clock is None:
                continue
            if stream.queue:
                t = stream.clock.to_real(stream.queue[0].ts)
            else:
                t = stream.horizon_real()
                if t is None:
                    return None
            if low is None or t < low:
                low = t
        return low

    def stats(self) -> dict[str, object]:
        return {
            "committed": self.committed_total,
            "pending": {s.name: len(s.queue) + sum(len(b.events) for b in s.unclocked) for s in self._streams.values()},
            "early_batches": {s.name: len(s.early) for s in self._streams.values()},
            "lost": {s.name: s.lost for s in self._streams.values()},
            "unmatched_recvs": self.unmatched_recvs,
            "duplicate_batches": self.duplicate_batches,
            "sends_remembered": len(self._sends),
        }

    # -- internals -----------------------------------------------------------------------

    def _stream(self, node: str) -> _NodeStream:
        stream = self._streams.get(node)
        if stream is None:
            if self._fixed_nodes:
                raise BatchRejected(f"unknown node {node!r}; the cluster is {sorted(self._streams)}")
            stream = self._streams[node] = _NodeStream(node)
        return stream

    def _enqueue(self, stream: _NodeStream, batch: Batch) -> None:
        events = batch.events
        if events:
            stream.queue.extend(events)
            queued = self._queued_sends
            for e in events:
                if e.kind is _SEND:
                    queued[e.id] = queued.get(e.id, 0) + 1
            last = events[-1].ts
            if last > stream.horizon_mono:
                stream.horizon_mono = last
        if batch.until_ns > stream.horizon_mono:
            stream.horizon_mono = batch.until_ns
        stream.lost += batch.lost

    def _pump_all(self) -> None:
        self._drive(list(self._streams.values()))
        self._pump_blocked()

    def _pump_blocked(self) -> None:
        """Retry nodes stuck on a RECV whose SEND nobody has: horizons may have moved."""
        while True:
            stuck = [s for s in self._streams.values() if s.queue and s.queue[0].kind is _RECV]
            if not stuck or not self._drive(stuck):
                return

    def _drive(self, streams: list[_NodeStream]) -> bool:
        """Pump the given nodes and every node their commits unblock; True if anything committed.

        A worklist, not recursion: a long ping-pong between two nodes would otherwise nest
        one call per message.
        """
        work = deque(streams)
        progressed = False
        while work:
            stream = work.popleft()
            committed, woken = self._pump(stream)
            progressed |= committed
            work.extend(woken)
        return progressed

    def _pump(self, stream: _NodeStream) -> tuple[bool, list[_NodeStream]]:
        """Commit the longest committable prefix of one node's queue.

        Returns whether anything was committed and the nodes whose blocking SEND it committed.
        """
        queue = stream.queue
        if not queue or stream.clock is None:
            return False, []
        offset = stream.clock.real_ns - stream.clock.mono_ns
        sends = self._sends
        queued_sends = self._queued_sends
        out = self._out
        lamport = stream.lamport
        index = stream.committed
        start = index
        woken: list[_NodeStream] = []
        while queue:
            event = queue[0]
            kind = event.kind
            send = None
            if kind is _RECV:
                send = sends.get(event.id)
                if send is None:
                    if event.id in queued_sends:
                        waiters = self._waiting.setdefault(event.id, [])
                        if stream not in waiters:
                            waiters.append(stream)
                        break
                    if not self._others_complete(stream, event.ts + offset + self.skew_ns):
                        break
                    self.unmatched_recvs += 1
                elif send.lamport > lamport:
                    lamport = send.lamport
            queue.popleft()
            lamport += 1
            entry = Committed(event, event.ts + offset, lamport, index, send)
            index += 1
            out.append(entry)
            if send is not None:
                send.recvs.append((event.node, index - 1))
            elif kind is _SEND:
                pid = event.id
                sends[pid] = entry
                self._send_order.append(entry)
                left = queued_sends[pid] - 1
                if left:
                    queued_sends[pid] = left
                else:
                    del queued_sends[pid]
                waiters = self._waiting.pop(pid, None)
                if waiters:
                    woken.extend(w for w in waiters if w is not stream)
        stream.lamport = lamport
        stream.committed = index
        self.committed_total += index - start
        if index != start:
            self._forget_old_sends()
        return index != start, woken

    def _others_complete(self, stream: _NodeStream, real_ns: int) -> bool:
        """True when every other node's stream is complete up to `real_ns`."""
        for other in self._streams.values():
            if other is stream:
                continue
            horizon = other.horizon_real()
            if horizon is None or horizon < real_ns:
                return False
        return True

    def _forget_old_sends(self) -> None:
        """Beyond `max_sends` first: the frontier is unknown while a node is silent, and the
        count must hold then too."""
        order = self._send_order
        while len(order) > self.max_sends:
            self._forget(order.popleft())
        frontier = self.frontier_ns if order else None
        if frontier is None:
            return
        cutoff = frontier - self.link_timeout_ns - self.skew_ns
        while order and order[0].real_ns < cutoff:
            self._forget(order.popleft())

    def _forget(self, send: Committed) -> None:
        if self._sends.get(send.event.id) is send:  # not overwritten by a later SEND of the same id
            del self._sends[send.event.id]
