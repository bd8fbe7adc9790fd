"""Ingest: observer batches -> the timeline builder, the recording, and the metrics.

`Ingest` is the `BatchSink` of the batch server (called from one thread per observer
connection, hence the lock). Per node it

* numbers batches for the builder: the first batch a node sends this mediator defines
  the base of its sequence, so a restarted mediator picks up observers in mid-stream
  (the builder wants seqs from 0, without gaps); a new clock pair from a node (a
  restarted observer whose seqs start again at 0) starts a new base after what the
  builder already has. The builder orders the batches per node by seq and drops
  duplicates (resends after a reconnect). A batch read late from a replaced incarnation's
  connection (a killed observer's last bytes, read after its successor's clock pair) is
  dropped and counted in `superseded_batches`: taken, it would become the new base and
  the successor's batches below its seq would be dropped as duplicates;
* with the message layer (mallory/mediator/legs.py), gives each RECV of a packet the
  gateway relayed the id of the sender's packet it carried bytes of (`relink`), so the
  timeline joins the two across the layer, and leaves out the RECVs of packets the gateway
  made itself (no SEND would ever join them);
* joins SEND/RECV events with the packet ids the gateway saw (`SeenPackets`);
* writes every clock pair and batch, as fed to the builder, to the recording (wire codec);
* drains committed entries, measures commit lag (real time now minus the event's time
  on the common axis) and hands them to each of `subscribers` (callables of the entries,
  called under the ingest's lock: they must not call back into it). It keeps none itself:
  a window service subscribed takes what it needs.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import replace
from typing import IO

from mallory.mediator.firewall import SeenPackets
from mallory.timeline.builder import Committed, TimelineBuilder
from mallory.timeline.codec import encode
from mallory.timeline.event import Batch, ClockPair, Event, Kind

#: A relink's answer for a packet no node sent (the message layer's own ACKs and handshakes,
#: mallory/mediator/legs.py): its RECV is left out of the timeline. Packet ids are unsigned.
NO_SEND = -1
#: Packet ids of a node's SEND/RECV events that the firewall had not logged when their batch
#: arrived, kept for a late join; past this many an id counts as unjoined for good.
MAX_WAITING_JOINS = 10_000
#: How often waiting ids are looked up again. An id gets one or two looks (1-2 s) and then
#: counts as unjoined for good: a batch overtakes its packet by milliseconds, while client
#: traffic's ids never join (it does not cross the FORWARD rules) and, kept until the stats
#: were read, filled the waiting set for the rest of the campaign.
JOIN_RECHECK_NS = 1_000_000_000


class _Node:
    __slots__ = ("clock", "base", "offset", "next_seq", "batches", "events", "lost", "joined", "unjoined",
                 "waiting", "looked_up")

    def __init__(self) -> None:
        self.clock: ClockPair | None = None
        self.base: int | None = None  # observer seq that maps to builder seq `offset`
        self.offset = 0
        self.next_seq = 0  # next builder seq
        self.batches = 0
        self.events = 0
        self.lost = 0
        self.joined = 0
        self.unjoined = 0  # given up on (looked up twice, or beyond MAX_WAITING_JOINS)
        self.waiting: set[int] = set()  # not joined yet, not looked up again yet
        self.looked_up: set[int] = set()  # looked up once more in vain: one last look left

    def join_late(self, packets: SeenPackets) -> None:
        """Count the waiting ids the firewall has logged since as joined."""
        for ids in (self.waiting, self.looked_up):
            late = {i for i in ids if i in packets}
            self.joined += len(late)
            ids -= late

    def age_waiting(self, packets: SeenPackets) -> None:
        """The periodic look: ids still missing after their last look are unjoined for good."""
        self.join_late(packets)
        self.unjoined += len(self.looked_up)
        self.looked_up, self.waiting = self.waiting, set()


class Ingest:
    def __init__(
        self,
        builder: TimelineBuilder,
        packets: SeenPackets | None = None,
        recording: IO[bytes] | None = None,
    ) -> None:
        self.builder = builder
        self.packets = packets
        self.recording = recording
        self.subscribers: list[Callable[[list[Committed]], None]] = []
        #: the message layer's relinks (legs.LegJoin.relink): the id a RECV joins with, or
        #: NO_SEND for a RECV to leave out
        self.relink: Callable[[int], int | None] | None = None
        self.left_out = 0  # RECVs of packets no node sent (NO_SEND)
        self.lags_ns: deque[int] = deque(maxlen=10_000)
        self.duplicates = 0
        self.superseded = 0  # batches of an observer incarnation a newer clock pair replaced
        self._nodes: dict[str, _Node] = {}
        self._lock = threading.Lock()
        self.join_recheck_ns = JOIN_RECHECK_NS  # tests shorten it
        self._rechecked_ns = time.monotonic_ns()

    def on_clock(self, clock: ClockPair) -> None:
        with self._lock:
            node = self._nodes.setdefault(clock.node, _Node())
            if node.clock is not None and node.clock != clock:
                # A new observer incarnation: its seqs restart; continue after what we have.
                node.base = None
                node.offset = node.next_seq
            node.clock = clock
            self.builder.add_clock(clock)
            self._record(clock)
            self._drain()

    def on_batch(self, batch: Batch, clock: ClockPair | None = None) -> None:
        """Take `batch`, sent after `clock` on its connection (None: the mediator's own)."""
        with self._lock:
            node = self._nodes.setdefault(batch.node, _Node())
            if clock is not None and node.clock is not None and clock != node.clock:
                self.superseded += 1
                return
            base = batch.seq if node.base is None else node.base
            seq = batch.seq - base + node.offset
            if seq < node.offset:
                self.duplicates += 1  # older than this incarnation's first batch here
                return
            rebased = replace(batch, seq=seq, events=self._relinked(batch.events))
            before = self.builder.duplicate_batches
            self.builder.add_batch(rebased)
            node.base = base
            if self.builder.duplicate_batches != before:
                self.duplicates += 1
                return
            node.next_seq = max(node.next_seq, seq + 1)
            node.batches += 1
            node.events += len(batch.events)
            node.lost += batch.lost
            if self.packets is not None:
                packets = self.packets
                for e in batch.events:
                    if e.kind is Kind.SEND or e.kind is Kind.RECV:
                        if e.id in packets:
                            node.joined += 1
                        elif len(node.waiting) < MAX_WAITING_JOINS:
                            # An observer's batch can overtake its packet to the firewall (a
                            # busy queue thread): look it up again within 1-2 s.
                            node.waiting.add(e.id)
                        else:
                            node.unjoined += 1
                if time.monotonic_ns() - self._rechecked_ns >= self.join_recheck_ns:
                    self._rechecked_ns = time.monotonic_ns()
                    for each in self._nodes.values():
                        each.age_waiting(packets)
            self._record(rebased)
            self._drain()

    def _relinked(self, events: list[Event]) -> list[Event]:
        relink = self.relink
        if relink is None:
            return events
        out = []
        for e in events:
            if e.kind is Kind.RECV and (origin := relink(e.id)) is not None:
                if origin == NO_SEND:
                    self.left_out += 1
                    continue
                e = e._replace(id=origin)
            out.append(e)
        return out

    def _record(self, record: ClockPair | Batch) -> None:
        if self.recording is not None:
            self.recording.write(encode(record) + b"\n")
            self.recording.flush()

    def _drain(self) -> None:
        entries = self.builder.drain()
        if not entries:
            return
        now = time.time_ns()
        self.lags_ns.extend(now - c.real_ns for c in entries)
        for subscriber in self.subscribers:
            subscriber(entries)

    def frontier_ns(self) -> int | None:
        with self._lock:
            return self.builder.frontier_ns

    def lost_until_ns(self) -> int | None:
        """The builder's `lost_until_ns`: a window starting before it may miss events or links."""
        with self._lock:
            return self.builder.lost_until_ns

    def held(self) -> dict[str, int]:
        """How much the ingest and its builder hold now, each bounded (the mediator's memory
        metrics): SEND/RECV ids waiting for a late join (1-2 s of them, MAX_WAITING_JOINS a
        node), commit lags kept, the builder's committed SENDs remembered (MAX_SENDS), events
        received and not committed, and batches waiting behind a gap (builder.py's bounds)."""
        with self._lock:
            builder = self.builder.stats()
            return {"join_waiting": sum(len(n.waiting) + len(n.looked_up) for n in self._nodes.values()),
                    "lags": len(self.lags_ns),
                    "sends_remembered": builder["sends_remembered"],
                    "pending_events": sum(builder["pending"].values()),
                    "early_batches": sum(builder["early_batches"].values())}

    def stats(self) -> dict[str, object]:
        with self._lock:
            lags = sorted(self.lags_ns)
            if self.packets is not None:
                for n in self._nodes.values():
                    n.join_late(self.packets)
            nodes = {
                name: {"batches": n.batches, "events": n.events, "lost": n.lost, "joined": n.joined,
                       "unjoined": n.unjoined + len(n.waiting) + len(n.looked_up), "next_seq": n.next_seq}
                for name, n in sorted(self._nodes.items())
            }
            builder = self.builder.stats()
            frontier = self.builder.frontier_ns

        def pct(p: float) -> float | None:
            return round(lags[min(len(lags) - 1, int(p * len(lags)))] / 1e6, 3) if lags else None

        return {
            "nodes": nodes,
            "batches": sum(n["batches"] for n in nodes.values()),
            "events": sum(n["events"] for n in nodes.values()),
            "lost_events": sum(n["lost"] for n in nodes.values()),
            "duplicate_batches": self.duplicates,
            "superseded_batches": self.superseded,
            "committed": builder["committed"],
            "pending": builder["pending"],
            "unmatched_recvs": builder["unmatched_recvs"],
            "forced_recvs": builder["forced_recvs"],
            "skipped_batches": builder["skipped_batches"],
            "recvs_left_out": self.left_out,
            "commit_lag_ms": {"p50": pct(0.5), "p99": pct(0.99), "max": pct(1.0) if lags else None},
            "frontier_lag_ms": round((time.time_ns() - frontier) / 1e6, 3) if frontier is not None else None,
        }
