"""Windows over the committed timeline: "summarise everything committed in [t0, t1)".

`Timeline` puts the builder and a buffer of committed entries together. The campaign loop
asks for a window once the builder's frontier has passed its end; the entries before the
end are then released, so memory holds only what has not been summarised yet.
"""

from __future__ import annotations

from mallory.timeline.abstraction import Summary, abstract, make_abstraction
from mallory.timeline.builder import Committed, TimelineBuilder
from mallory.timeline.codec import Record
from mallory.timeline.event import Batch, ClockPair, Event


class EntryBuffer:
    """Committed entries not yet taken by a window, in commit order (a causal order), as the
    builder's `Committed` objects (offline: one recording, read once). The mediator, which
    buffers a live stream, keeps compact bounded rows instead (rows.py `EntryRows`)."""

    def __init__(self) -> None:
        self._entries: list[Committed] = []
        #: entries that committed after a window ending past their time had been taken
        self.late = 0
        #: entries no window covered (between two windows, or before the first), released
        #: by the take of the next window; windows that tile the stream leave none
        self.unwindowed = 0
        self._taken_until: int | None = None  # the latest end of a window taken

    def add(self, entries: list[Committed]) -> None:
        self._entries.extend(entries)

    def __len__(self) -> int:
        return len(self._entries)

    def earliest(self) -> int | None:
        """The earliest common-axis time among the buffered entries."""
        return min((e.real_ns for e in self._entries), default=None)

    def peek(self, t0: int, t1: int) -> list[Committed]:
        """The entries in [t0, t1), in commit order, leaving them buffered."""
        return [e for e in self._entries if t0 <= e.real_ns < t1]

    def take(self, t0: int, t1: int) -> list[Committed]:
        """The entries in [t0, t1), in commit order; everything before t1 is released.

        Entries before t0 that are still here are never mixed into this one: they are
        counted in `late` when an earlier window ended past them (they came too late for
        it), in `unwindowed` when none did (they fell between windows).
        """
        inside: list[Committed] = []
        later: list[Committed] = []
        before = late = 0
        # before the first window nothing can be late
        late_before = None if self._taken_until is None else min(t0, self._taken_until)
        for entry in self._entries:
            t = entry.real_ns
            if t >= t1:
                later.append(entry)
            elif t >= t0:
                inside.append(entry)
            else:
                before += 1
                late += late_before is not None and t < late_before
        self._entries = later
        self.late += late
        self.unwindowed += before - late
        self._taken_until = t1 if self._taken_until is None else max(t1, self._taken_until)
        return inside

    def release_before(self, t: int, slack: int = 0) -> None:
        """Forget the entries before t, which no window will ask for. With `slack`, only once
        the oldest buffered entry is that much older than t, so that a cutoff moving with
        every batch costs one pass over the buffer per `slack` of stream time, not per batch."""
        if self._entries and self._entries[0].real_ns < t - slack:
            self._entries = [e for e in self._entries if e.real_ns >= t]


class Timeline:
    """The builder plus the committed entries not yet taken by a window."""

    def __init__(self, builder: TimelineBuilder | None = None) -> None:
        self.builder = builder or TimelineBuilder()
        self.buffer = EntryBuffer()

    def add(self, record: Record) -> None:
        """Feed one decoded wire record (batch, clock pair or single event)."""
        builder = self.builder
        if isinstance(record, Batch):
            builder.add_batch(record)
        elif isinstance(record, ClockPair):
            builder.add_clock(record)
        elif isinstance(record, Event):
            builder.add_event(record)
        else:
            raise TypeError(f"not a timeline record: {type(record).__name__}")
        self.buffer.add(builder.drain())

    def finish(self) -> None:
        """The input is over: commit what can only be committed now."""
        self.builder.finish()
        self.buffer.add(self.builder.drain())

    def complete_until(self, t1: int) -> bool:
        """True when every event before t1 (common axis, ns) is committed."""
        frontier = self.builder.frontier_ns
        return frontier is not None and frontier >= t1

    def earliest(self) -> int | None:
        return self.buffer.earliest()

    def origin(self) -> int | None:
        """A safe start for the first window: no event still to commit can be earlier.

        None until the frontier is known (every node heard from).
        """
        frontier = self.builder.frontier_ns
        if frontier is None:
            return None
        earliest = self.buffer.earliest()
        return frontier if earliest is None else min(earliest, frontier)

    def take(self, t0: int, t1: int) -> list[Committed]:
        """`EntryBuffer.take`: call it once `complete_until(t1)` holds, or accept a partial window."""
        return self.buffer.take(t0, t1)

    @property
    def late(self) -> int:
        return self.buffer.late

    def pending(self) -> int:
        return len(self.buffer)


def summarize(entries: list[Committed], abstraction: str = "event-history", packet_types: str = "messages") -> Summary:
    """One window's summary under the named abstraction, packets typed by `packet_types`
    (mallory/timeline/abstraction.py PACKET_TYPES)."""
    return abstract(entries, make_abstraction(abstraction, packet_types)).summary()
