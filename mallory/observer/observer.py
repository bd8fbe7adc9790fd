"""The per-node observer loop: packets from NFQUEUE (and code events from the node's shm
ring when there is one) cut into a batch every `interval` seconds and handed to the
`BatchSender` (mallory/observer/sender.py), which owns the connection to the mediator,
the bounded buffer and reconnects.

A batch's `until_ns` promises that no later batch of this node holds an event older than
it (mallory/timeline/event.py), and the timeline builder takes the node as complete up to
the batch's last event too; so a batch holds only events older than its `until_ns`, and
the rest waits for a later cut. `until_ns` is the monotonic time of the cut: packet events
are stamped when read, so every later one is later than the cut. Ring events are stamped
by the SUT when they happen, and a slot still being written at the cut is read at a later
one: with a ring, `until_ns` is at most the ring's `complete_until_ns` (llvm-pass/RING.md,
"Completeness"), and the events read that are not older than it wait in the ring's
backlog (mallory/observer/ring.py, `RingBacklog`).

A batch holds at most MAX_BATCH_EVENTS (8192) events, and a cut reads at most that many
from the ring: a burst (a restarted node re-applying its whole log writes tens of
thousands of events within milliseconds) leaves the rest in the ring, and the oldest
MAX_BATCH_EVENTS of what is ready go, the batch's `until_ns` then lowered to the first
event left out. While anything is left the loop cuts again at once instead of waiting the
interval. 8192 because it bounds what one cut builds to about 2 MB of Python objects and a
0.5 MB line here and in the mediator (whose per-thread malloc arenas grew to the largest
batch they ever decoded), while a steady cluster's batch stays far below it (the soak's
example SUT, at its busiest, wrote about 700 events per 0.1 s over its three nodes): the
limit only cuts bursts. It is also the span the ring reader gives back to the kernel at a
time (256 KiB).

With a message format declared (mallory/observer/messages.py), a packet on a TCP flow to or
from a declared port gets the type names of the messages it starts as its data
(mallory/observer/framing.py); every other packet keeps its payload hex. Without one the
packet loop has no per-packet work for it (`Observer.on_packets` says why there are two).

Log-derived events (mallory/observer/log_events.py) are stamped when their line is read:
the log files are polled every LOG_POLL_S in the loop and once more right before the cut
(so their stamps precede it).
"""

from __future__ import annotations

import heapq
import select
import threading
import time
from typing import Callable, Protocol

from mallory.observer.framing import MessageSplitter
from mallory.observer.nfq import NF_INET_LOCAL_OUT
from mallory.observer.packet import WriteStarts, id_and_data
from mallory.timeline.codec import MAX_BATCH_EVENTS
from mallory.timeline.event import ClockPair, Event, Kind, packet_data

LOG_POLL_S = 0.02
IDLE_WAKE_S = 0.05  # how often the loop looks at `stop` when no packet arrives
FINISH_S = 2.0  # how long `finish` goes on cutting a backlog before it counts the rest lost


class EventSource(Protocol):
    """A shm ring's backlog (mallory/observer/ring.py, `RingBacklog`) as the observer uses it."""

    complete_until_ns: int  # every event neither read nor waiting has ts >= this
    truncated: bool  # the last read stopped at its limit with more written

    def read(self, max_events: int) -> None:
        """Read up to `max_events` more events from the ring; they wait."""
        ...

    def ts_before(self, until_ns: int) -> list[int]:
        """The ts of the waiting events older than `until_ns`."""
        ...

    def take_before(self, until_ns: int) -> list[Event]:
        """Remove the waiting events older than `until_ns` and return them in ts order."""
        ...

    def discard(self) -> int:
        """Forget the waiting events; how many there were."""
        ...


class LogSource(Protocol):
    """A LogWatcher (mallory/observer/log_events.py): LOG events from tailed log files."""

    def poll_events(self) -> list[Event]: ...

    def checkpoint(self) -> None:
        """Remember how far the logs were read (called once their events are submitted)."""
        ...


class PacketSource(Protocol):
    """NfQueue (mallory/observer/nfq.py) or NfLog (mallory/observer/nflog.py)."""

    lost: int

    def fileno(self) -> int: ...

    def drain(self, on_packets: Callable[[list[tuple]], None], limit: int = ...) -> int:
        """Hand every pending packet to on_packets as (number, hook, mono_ns, ip_bytes)."""
        ...


class Submitter(Protocol):
    def submit(self, events: list[Event], until_ns: int, lost: int = 0) -> None: ...


def clock_pair(node: str) -> ClockPair:
    """Monotonic and real time read together: the real clock read between two monotonic
    reads, paired with their midpoint."""
    m0 = time.monotonic_ns()
    real = time.time_ns()
    m1 = time.monotonic_ns()
    return ClockPair(node, (m0 + m1) // 2, real)


class Observer:
    def __init__(
        self,
        node: str,
        capture: PacketSource | None,
        sender: Submitter,
        *,
        interval: float = 0.1,
        ring: EventSource | None = None,
        ring_lost: Callable[[], int] | None = None,
        logs: LogSource | None = None,
        max_events: int = MAX_BATCH_EVENTS,
        messages: MessageSplitter | None = None,
    ) -> None:
        self.node = node
        self.capture = capture
        self.sender = sender
        self.interval = interval
        self.ring = ring
        self.ring_lost = ring_lost
        self.batches = 0
        self.packets = 0
        self.ring_events = 0
        self.logs = logs
        self.log_events = 0
        self.max_events = max_events
        self._events: list[Event] = []  # packet and log events not yet in a batch
        self._lost_reported = 0
        self._writes = WriteStarts()
        self.messages = messages

    def on_packets(self, packets: list[tuple]) -> None:
        """Turn (number, hook, mono_ns, ip_bytes) tuples into SEND/RECV events (the hot
        path: locals, and Events built with tuple.__new__, which skips NamedTuple's
        Python-level __new__).

        Two loops, chosen once per batch: this one without a message format, and
        `_on_framed_packets` with one. They differ in one call per packet; folding them
        into one loop puts a call (a splitter that always says None, or a data function
        chosen per batch) on every packet of every campaign without a format, 15 to 30 ns
        of the ~1.9 us this loop spends on a packet (measured on libraft packets, Python
        3.11). On a flow the format does not declare the two give the same events
        (tests/unit/observer/test_messages.py): a change to one belongs in the other."""
        if self.messages is not None:
            self._on_framed_packets(packets)
            return
        node, append, new = self.node, self._events.append, tuple.__new__
        send, recv = Kind.SEND, Kind.RECV
        write_data = self._writes.data
        count = 0
        for _, hook, ts, payload in packets:
            found = id_and_data(payload)
            if found is not None:
                data = write_data(payload, found[1]) if found[1] else ""
                append(new(Event, (node, send if hook == NF_INET_LOCAL_OUT else recv, ts, found[0], data)))
                count += 1
        self.packets += count

    def _on_framed_packets(self, packets: list[tuple]) -> None:
        """on_packets with a message format: on a declared flow the splitter's data, with
        the data the packet has without one as its bytes part (`packet_data`); on any
        other packet exactly what `on_packets` gives (kept in step with it, see there)."""
        node, append, new = self.node, self._events.append, tuple.__new__
        send, recv = Kind.SEND, Kind.RECV
        write_data, framed = self._writes.data, self.messages.data
        count = 0
        for _, hook, ts, payload in packets:
            found = id_and_data(payload)
            if found is not None:
                typed = framed(payload, ts)
                data = write_data(payload, found[1]) if found[1] else ""
                if typed is not None:
                    data = packet_data(typed, data)
                append(new(Event, (node, send if hook == NF_INET_LOCAL_OUT else recv, ts, found[0], data)))
                count += 1
        self.packets += count

    def poll_logs(self) -> None:
        """Read the log files now (their events are stamped at this read)."""
        if self.logs is None:
            return
        found = self.logs.poll_events()
        if found:
            self._events.extend(found)
            self.log_events += len(found)

    def cut(self, *, final: bool = False) -> bool:
        """Hand the sender a batch: the oldest events ready, at most `max_events`, all older
        than its `until_ns` (see the module docstring). True when more is waiting than this
        batch could take (the ring has more, or the limit left ready events out): the caller
        cuts again at once. `final`: this observer sends nothing after it, so what is left
        is counted lost in this batch rather than kept."""
        self.poll_logs()
        until = time.monotonic_ns()
        ring = self.ring
        if ring is not None:
            ring.read(self.max_events)
            until = min(until, ring.complete_until_ns)
        pending = self._events
        ready = [e.ts for e in pending if e.ts < until]
        if ring is not None:
            ready += ring.ts_before(until)
        more = ring is not None and ring.truncated
        if len(ready) > self.max_events:
            until = limit_until(ready, self.max_events)
            more = True
        events = [e for e in pending if e.ts < until]
        self._events = [e for e in pending if e.ts >= until]
        if ring is not None:
            from_ring = ring.take_before(until)
            self.ring_events += len(from_ring)
            events += from_ring
        events.sort(key=_ts)
        lost_total = (self.capture.lost if self.capture else 0) + (self.ring_lost() if self.ring_lost else 0)
        lost, self._lost_reported = lost_total - self._lost_reported, lost_total
        if final:
            lost += len(self._events) + (ring.discard() if ring is not None else 0)
            self._events = []
        self.sender.submit(events, until, lost)
        self.batches += 1
        if self.logs is not None and not any(e.kind is _LOG for e in self._events):
            self.logs.checkpoint()  # not while a log event read waits for a later batch
        return more and not final

    def run(self, stop: threading.Event) -> None:
        """Read packets and cut batches until `stop` is set (then call `finish`)."""
        next_cut = time.monotonic() + self.interval
        next_log_poll = 0.0
        wake_s = LOG_POLL_S if self.logs is not None else IDLE_WAKE_S
        fds = [self.capture.fileno()] if self.capture else []
        while not stop.is_set():
            timeout = min(max(0.0, next_cut - time.monotonic()), wake_s)
            if fds:
                readable, _, _ = select.select(fds, [], [], timeout)
                if readable:
                    self.capture.drain(self.on_packets)
            else:
                stop.wait(timeout)
            if self.logs is not None and time.monotonic() >= next_log_poll:
                self.poll_logs()
                next_log_poll = time.monotonic() + LOG_POLL_S
            if time.monotonic() >= next_cut:
                if self.cut():  # behind: the next cut comes once readable packets are read
                    next_cut = time.monotonic()
                    continue
                next_cut += self.interval
                if next_cut < time.monotonic():  # we fell behind: do not cut in a burst
                    next_cut = time.monotonic() + self.interval

    def finish(self) -> None:
        """Read what is still queued and cut the last batches: at once while a backlog is
        left, for up to FINISH_S, then a final one (which counts what is still left lost).
        Call it after the rules are gone and before the queue is closed: unbinding a queue
        DROPS the packets still in it."""
        if self.capture:
            self.capture.drain(self.on_packets, limit=1 << 30)
        deadline = time.monotonic() + FINISH_S
        while self.cut() and time.monotonic() < deadline:
            pass
        self.cut(final=True)


_LOG = Kind.LOG


def _ts(event: Event) -> int:
    return event.ts


def limit_until(ready_ts: list[int], limit: int) -> int:
    """The `until_ns` that lets the `limit` oldest of events with these stamps (more than
    `limit` of them) into a batch: the stamp of the oldest one left out, which leaves out
    every event with that stamp too. When the `limit` + 1 oldest all share one stamp, that
    stamp + 1: they all go (a batch of more than `limit`, but never an empty one)."""
    oldest = heapq.nsmallest(limit + 1, ready_ts)
    first_out = oldest[limit]
    return first_out if oldest[0] < first_out else first_out + 1
