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

What a node has received but not committed is bounded too, per node, since each can wait
forever on something that may never come, while its node's stream goes on at full rate:

* batches after a sequence gap (`early`) wait for the gap to fill. A gap that never fills
  (an observer's batch refused, then acknowledged with the next one; an observer restarted
  with batches in flight) held every later batch of the node, and its horizon stood still.
  Beyond `max_early` events (an empty batch counts as one) the gap is given up: the
  builder goes on from the first batch after it, counts the batches it skipped
  (`skipped_batches`), and a skipped batch that comes after all is dropped as a duplicate.
* events in order (`queue`) wait behind a RECV whose SEND has not come: while the sender's
  own queue is stuck, or until every other node is complete past the RECV's time. A node
  whose observer is silent or was never heard from, or whose stream stops at a gap, holds
  that completeness back forever, and every RECV from outside the cluster (a client's
  request) then stopped its node's queue. Beyond `max_queue` events, a blocked RECV commits
  without its SEND (`forced_recvs`), at the risk of missing a link.
* batches before the node's clock pair (`unclocked`) cannot be placed on the time axis at
  all; beyond `max_queue` events the next one is refused (an observer sends its clock pair
  first on every connection, and the mediator refuses batches before it, so this is input
  no observer makes).

Skipped events and forced RECVs leave the timeline incomplete at their time: every such
time is before `lost_until_ns`, so a window starting before it may miss events or links,
as one starting before `EntryRows.dropped_until_ns` may (timeline/rows.py): its reader
must not take it for whole.
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
#: Events of one node waiting behind a sequence gap at most (an empty batch counts as one),
#: ~5 MB of events. Batches come in order over an observer's connection; a gap fills from a
#: resend after a reconnect, at most the sender's window (64 batches) later.
MAX_EARLY = 32_768
#: Events of one node received in order but not committed at most (~5 MB of events). A RECV
#: from outside the cluster waits about skew_ns plus a batch interval (~300 ms); at the
#: soak's ~6,000 events/s over 4 nodes this is ~20 s of one node's stream.
MAX_QUEUE = 32_768


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
    early_weight: int = 0  # their events, an empty batch counting as one (MAX_EARLY)
    unclocked: list[Batch] = field(default_factory=list)  # contiguous, waiting for the clock pair
    unclocked_events: int = 0
    queue: deque = field(default_factory=deque)  # contiguous events not yet committed
    skipped: int = 0  # batches of gaps given up
    skipped_until_mono: int | None = None  # past the skipped events, until the clock pair places it
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
        max_early: int = MAX_EARLY,
        max_queue: int = MAX_QUEUE,
    ) -> None:
        if skew_ns < 0 or link_timeout_ns < 0:
            raise ValueError("skew_ns and link_timeout_ns must be non-negative")
        if min(max_sends, max_early, max_queue) < 1:
            raise ValueError("max_sends, max_early and max_queue must be at least 1")
        self.skew_ns = skew_ns
        self.link_timeout_ns = link_timeout_ns
        self.max_sends = max_sends
        self.max_early = max_early
        self.max_queue = max_queue
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
        #: RECVs committed without waiting for their SEND (a queue beyond max_queue)
        self.forced_recvs = 0
        self.duplicate_batches = 0
        self.committed_total = 0
        #: every skipped event and forced RECV is earlier than this on the common axis (None:
        #: none so far); see the module docstring
        self.lost_until_ns: int | None = None

    # -- input ---------------------------------------------------------------------------

    def add_clock(self, pair: ClockPair) -> None:
        stream = self._stream(pair.node)
        first = stream.clock is None
        stream.clock = pair
        if stream.skipped_until_mono is not None:  # a gap given up before the clock pair
            self._lose(pair.to_real(stream.skipped_until_mono))
            stream.skipped_until_mono = None
        if first and stream.unclocked:
            for batch in stream.unclocked:
                self._enqueue(stream, batch)
            stream.unclocked.clear()
            stream.unclocked_events = 0
            self._pump_all()

    def add_batch(self, batch: Batch) -> None:
        """Take one batch, in any order; commits whatever becomes committable."""
        stream = self._stream(batch.node)
        if batch.seq < stream.next_seq or batch.seq in stream.early:
            self.duplicate_batches += 1
            return
        if stream.clock is None and stream.unclocked_events + len(batch.events) > self.max_queue:
            raise BatchRejected(f"node {stream.name} sent more than {self.max_queue} events before its clock pair")
        stream.early[batch.seq] = batch
        stream.early_weight += 1 + len(batch.events)
        progressed = False
        while True:
            while stream.next_seq in stream.early:
                ready = stream.early.pop(stream.next_seq)
                stream.early_weight -= 1 + len(ready.events)
                stream.next_seq += 1
                if stream.clock is None:
                    stream.unclocked.append(ready)
                    stream.unclocked_events += len(ready.events)
                else:
                    self._enqueue(stream, ready)
                    progressed = True
            if stream.early_weight <= self.max_early:
                break
            self._skip_gap(stream)
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
        """Counters, per node where a dict: events committed; received and not committed
        (`pending`); batches waiting behind a gap (`early_batches`) and batches of gaps given
        up (`skipped_batches`, MAX_EARLY); events the observers lost; RECVs committed without
        a SEND because none can come (`unmatched_recvs`) and because the queue reached its
        bound (`forced_recvs`, MAX_QUEUE); duplicate batches; SENDs remembered for RECVs."""
        streams = self._streams.values()
        return {
            "committed": self.committed_total,
            "pending": {s.name: len(s.queue) + s.unclocked_events for s in streams},
            "early_batches": {s.name: len(s.early) for s in streams},
            "skipped_batches": {s.name: s.skipped for s in streams},
            "lost": {s.name: s.lost for s in streams},
            "unmatched_recvs": self.unmatched_recvs,
            "forced_recvs": self.forced_recvs,
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

    def _skip_gap(self, stream: _NodeStream) -> None:
        """Give up the gap before the node's first early batch (the module docstring): the
        events it held, never to come, were no later than that batch's first event (a node's
        events are in time order), or than its end if it has none."""
        first = min(stream.early)
        stream.skipped += first - stream.next_seq
        stream.next_seq = first
        batch = stream.early[first]
        until = batch.events[0].ts if batch.events else batch.until_ns
        if stream.clock is None:
            previous = stream.skipped_until_mono
            stream.skipped_until_mono = until if previous is None else max(previous, until)
        else:
            self._lose(stream.clock.to_real(until))

    def _lose(self, real_ns: int) -> None:
        """Something at or before `real_ns` is missing from the timeline (an event or a link)."""
        if self.lost_until_ns is None or real_ns >= self.lost_until_ns:
            self.lost_until_ns = real_ns + 1

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
        max_queue = self.max_queue
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
                    queued = event.id in queued_sends
                    if not queued and self._others_complete(stream, event.ts + offset + self.skew_ns):
                        self.unmatched_recvs += 1
                    elif len(queue) > max_queue:  # its SEND may never come: MAX_QUEUE
                        self.forced_recvs += 1
                        self._lose(event.ts + offset)
                    else:
                        if queued:
                            waiters = self._waiting.setdefault(event.id, [])
                            if stream not in waiters:
                                waiters.append(stream)
                        break
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
