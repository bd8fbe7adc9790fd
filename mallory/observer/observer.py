"""The per-node observer loop: packets from NFQUEUE (and code events from the node's shm
ring when there is one) cut into a batch every `interval` seconds and handed to the
`BatchSender` (mallory/observer/sender.py), which owns the connection to the mediator,
the bounded buffer and reconnects.

A batch's `until_ns` is the monotonic time of the cut: packet events are stamped when read,
so every later one is later than the cut. Ring events are stamped by the SUT when they
happen; a slot still being written at the cut is read at the next one, so with a ring the
promise is made RING_MARGIN_NS before the cut.

Log-derived events (mallory/observer/log_events.py) are stamped when their line is read:
the log files are polled every LOG_POLL_S in the loop and once more right before the cut
(so their stamps precede it).
"""

from __future__ import annotations

import select
import threading
import time
from typing import Callable, Protocol

from mallory.observer.nfq import NF_INET_LOCAL_OUT
from mallory.observer.packet import WriteStarts, id_and_data
from mallory.timeline.event import ClockPair, Event, Kind

RING_MARGIN_NS = 1_000_000
LOG_POLL_S = 0.02
IDLE_WAKE_S = 0.05  # how often the loop looks at `stop` when no packet arrives


class EventSource(Protocol):
    """A shm ring reader (mallory/observer/ring.py) as the observer uses it."""

    def poll_events(self) -> list[Event]: ...


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
        self._unsorted = False  # log events are in this batch: sort it by ts at the cut
        self._events: list[Event] = []
        self._lost_reported = 0
        self._writes = WriteStarts()

    def on_packets(self, packets: list[tuple]) -> None:
        """Turn (number, hook, mono_ns, ip_bytes) tuples into SEND/RECV events (the hot
        path: locals, and Events built with tuple.__new__, which skips NamedTuple's
        Python-level __new__)."""
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

    def poll_logs(self) -> None:
        """Read the log files now (their events are stamped at this read)."""
        if self.logs is None:
            return
        found = self.logs.poll_events()
        if found:
            self._unsorted = True  # packets read before this poll may be stamped later, or earlier
            self._events.extend(found)
            self.log_events += len(found)

    def cut(self) -> None:
        """Close the current batch and hand it to the sender."""
        self.poll_logs()
        now = time.monotonic_ns()
        events, self._events = self._events, []
        until = now
        unsorted, self._unsorted = self._unsorted, False
        if self.ring is not None:
            ring_events = self.ring.poll_events()
            if ring_events:
                self.ring_events += len(ring_events)
                events.extend(ring_events)
                unsorted = True
            until = now - RING_MARGIN_NS
        if unsorted:
            events.sort(key=lambda e: e.ts)
        lost_total = (self.capture.lost if self.capture else 0) + (self.ring_lost() if self.ring_lost else 0)
        lost, self._lost_reported = lost_total - self._lost_reported, lost_total
        self.sender.submit(events, until, lost)
        self.batches += 1
        if self.logs is not None:
            self.logs.checkpoint()

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
                self.cut()
                next_cut += self.interval
                if next_cut < time.monotonic():  # we fell behind: do not cut in a burst
                    next_cut = time.monotonic() + self.interval

    def finish(self) -> None:
        """Read what is still queued and cut a last batch. Call it after the rules are gone
        and before the queue is closed: unbinding a queue DROPS the packets still in it."""
        if self.capture:
            self.capture.drain(self.on_packets, limit=1 << 30)
        self.cut()
