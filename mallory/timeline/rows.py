"""Committed entries kept as compact rows until a window takes them (the mediator's buffer).

`EntryBuffer` (window.py) keeps the builder's `Committed` objects: about 8 small Python
objects (~450 B) per entry, which pymalloc keeps as its high-water mark once freed. A live
mediator at thousands of events per second keeps tens of seconds of them between windows
(more between schedules, when nobody asks), so its memory followed the event rate. `EntryRows`
keeps each entry as one row of a numpy structured array (37 B with its data pointer, no Python
object per entry) and bounds the rows in number, whatever the rate:

* a row keeps what the readers of the entries it gives back read, and no more. Its only
  reader is the mediator's window service (mallory/mediator/windows.py), which gives its
  entries to the abstractions (abstraction.py: `summarize` for the learner's MinHash states,
  `behaviour` for event-pair coverage and models) and to `trace_of`/`causal_times` (the
  model's trace), and sends on only their results (`Window`). Those read, per column:

  - real (real_ns): which window an entry falls in (`take`, `peek`, the bounds below) and
    `causal_times`;
  - node, kind, id, data (the event): every abstraction, `behaviour`, `trace_of`;
  - send_node, send_index: which entry of the window a RECV receives (its `send`): every
    causal abstraction and `causal_times`. They hold the position (node, index) of the SEND
    a row is (for a SEND) or receives (for a RECV), so the two rows share one key; -1 when
    a row is neither or a RECV has no SEND.

  Not kept, because no reader reads them: the event's ts (the node's monotonic clock; the
  window service works on real_ns), lamport (the abstractions derive causality from the
  links; lamport numbers are the reports' and `mallory analyze`'s, which build their own
  timeline from the recording), an entry's index other than a SEND's, and a SEND's `recvs`.
  A rebuilt entry therefore has ts 0, lamport 0 (never a committed entry's: they start at
  1), index -1 unless it is a SEND, and a SEND's recvs empty. Its `send` is the SEND only
  when the SEND is among the returned entries (None otherwise: abstractions ignore arrows
  from outside the window). Keeping ts, lamport and every index cost 24 B a row (61 B).
* at most `max_entries` rows: adding beyond it drops the oldest rows (in commit order),
  counted in `dropped`. `dropped_until_ns` is then past every dropped row's time, so a window
  starting before it may miss entries (`truncated`): the caller must not take it for whole.
  Releases by time (`release_before`) count the same way; a window's `take` does not (what is
  before its end was summarised, or is late).

Data strings are shared between rows through a small table (one copy per distinct payload
abstraction), cleared when it outgrows MAX_STRINGS so it cannot grow with the stream.
"""

from __future__ import annotations

import numpy as np

from mallory.timeline.builder import Committed
from mallory.timeline.event import KIND_BY_VALUE, Event, Kind

#: Rows kept at most. At the 94-minute soak's ~6,000 events/s this is ~40 s of stream, 16
#: times the campaign loop's default window (2.5 s); it costs ~9 MB of rows (+ a quarter of
#: headroom for appends), where the same entries as `Committed` objects cost ~110 MB.
MAX_ENTRIES = 250_000
#: Distinct data strings shared at most before the table starts afresh.
MAX_STRINGS = 65_536
MAX_NODES = 32_767  # node codes are int16 (-1: no SEND)
_INITIAL_CAPACITY = 4_096
_NO_SEND = -1

#: 29 B a row (packed), and 8 B more for its data pointer in a parallel object array
ROW = np.dtype([
    ("real", "<i8"), ("id", "<u8"), ("send_index", "<i8"), ("kind", "u1"), ("node", "<i2"), ("send_node", "<i2"),
])
_SEND = Kind.SEND


class EntryRows:
    """Committed entries not yet taken by a window, as rows in commit order (a causal order);
    the same calls as `EntryBuffer`, plus the bound. The entries `peek` and `take` give back
    carry what windows read of them, not the rest (see the module docstring)."""

    def __init__(self, max_entries: int = MAX_ENTRIES) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be at least 1")
        self.max_entries = max_entries
        #: entries that committed after a window ending past their time had been taken
        self.late = 0
        #: entries no window covered (between two windows, or before the first), released
        #: by the take of the next window
        self.unwindowed = 0
        self._taken_until: int | None = None  # the latest end of a window taken
        #: entries released before any window took them: beyond max_entries, or by time
        self.dropped = 0
        #: every dropped entry is earlier than this (None: nothing dropped yet)
        self.dropped_until_ns: int | None = None
        self._rows = np.empty(0, ROW)
        self._data = np.empty(0, object)
        self._start = 0  # live rows are [_start, _end)
        self._end = 0
        self._nodes: list[str] = []
        self._node_codes: dict[str, int] = {}
        self._strings: dict[str, str] = {}

    def __len__(self) -> int:
        return self._end - self._start

    @property
    def capacity(self) -> int:
        """Rows allocated (live or not): what the buffer's memory follows."""
        return len(self._rows)

    def add(self, entries: list[Committed]) -> None:
        if not entries:
            return
        over = len(self) + len(entries) - self.max_entries
        if over > 0:
            from_live = min(over, len(self))
            if from_live:
                self._drop(self._rows["real"][self._start:self._start + from_live])
                self._data[self._start:self._start + from_live] = None
                self._start += from_live
            if over > from_live:  # a batch larger than the bound keeps only its newest
                skipped = entries[: over - from_live]
                self._drop(np.fromiter((e.real_ns for e in skipped), np.int64, len(skipped)))
                entries = entries[over - from_live:]
        k = len(entries)
        if self._end + k > len(self._rows):
            self._reallocate(len(self) + k)
        lo, hi = self._end, self._end + k
        rows = self._rows[lo:hi]
        events = [e.event for e in entries]
        code = self._node_code
        rows["real"] = [e.real_ns for e in entries]
        rows["id"] = [e.id for e in events]
        rows["kind"] = [e.kind for e in events]
        rows["node"] = [code(e.node) for e in events]
        sends = [e if e.event.kind is _SEND else e.send for e in entries]  # the SEND a row is or receives
        rows["send_node"] = [_NO_SEND if s is None else code(s.event.node) for s in sends]
        rows["send_index"] = [_NO_SEND if s is None else s.index for s in sends]
        self._data[lo:hi] = [self._shared(e.data) for e in events]
        self._end = hi

    def earliest(self) -> int | None:
        """The earliest common-axis time among the buffered entries."""
        return int(self._live("real").min()) if len(self) else None

    def peek(self, t0: int, t1: int) -> list[Committed]:
        """The entries in [t0, t1), in commit order, leaving them buffered."""
        real = self._live("real")
        return self._entries(np.flatnonzero((real >= t0) & (real < t1)))

    def take(self, t0: int, t1: int) -> list[Committed]:
        """The entries in [t0, t1), in commit order; everything before t1 is released.

        Entries before t0 that are still here are never mixed into this one: they are
        counted in `late` when an earlier window ended past them, in `unwindowed` when none
        did (EntryBuffer.take).
        """
        real = self._live("real")
        later = real >= t1
        inside = np.flatnonzero(~later & (real >= t0))
        before = int(np.count_nonzero(real < t0))
        late = 0 if self._taken_until is None else int(np.count_nonzero(real < min(t0, self._taken_until)))
        self.late += late
        self.unwindowed += before - late
        self._taken_until = t1 if self._taken_until is None else max(t1, self._taken_until)
        taken = self._entries(inside)
        self._keep(later)
        return taken

    def release_before(self, t: int, slack: int = 0) -> None:
        """Forget (and count as dropped) the entries before t, which no window will ask for.
        With `slack`, only once the oldest buffered entry is that much older than t, so that
        a cutoff moving with every batch costs one pass over the buffer per `slack` of stream
        time, not per batch."""
        if len(self) and self._rows["real"][self._start] < t - slack:
            real = self._live("real")
            keep = real >= t
            self._drop(real[~keep])
            self._keep(keep)

    def truncated(self, t0: int) -> bool:
        """True when a window starting at t0 may miss entries this buffer dropped."""
        return self.dropped_until_ns is not None and t0 < self.dropped_until_ns

    # -- internals -----------------------------------------------------------------------

    def _live(self, column: str) -> np.ndarray:
        return self._rows[column][self._start:self._end]

    def _drop(self, real: np.ndarray) -> None:
        if len(real):
            self.dropped += len(real)
            until = int(real.max()) + 1
            if self.dropped_until_ns is None or until > self.dropped_until_ns:
                self.dropped_until_ns = until

    def _keep(self, mask: np.ndarray) -> None:
        """Keep only the live rows where `mask` holds, in a fresh allocation that fits them
        (so the capacity follows the live rows down after a window released most of them)."""
        if mask.all():  # nothing released (an empty buffer too): no new allocation
            return
        live = slice(self._start, self._end)
        rows, data = self._rows[live][mask], self._data[live][mask]
        self._rows, self._data = np.empty(0, ROW), np.empty(0, object)
        self._start = self._end = 0
        self._reallocate(len(rows), rows, data)

    def _reallocate(self, needed: int, rows: np.ndarray | None = None, data: np.ndarray | None = None) -> None:
        """Move the live rows (or `rows`/`data`) to the front of an allocation with room for
        `needed` rows: half as many again (appends reallocate once per third of the rows),
        within a quarter above max_entries. At that ceiling (a buffer at its bound) the
        allocation is the one it has: the rows move down in place, so a full buffer never
        holds two copies of itself."""
        ceiling = self.max_entries + self.max_entries // 4
        capacity = max(needed, min(max(_INITIAL_CAPACITY, needed + needed // 2), ceiling))
        if rows is None and capacity == len(self._rows):
            self._compact()
            return
        if rows is None:
            live = slice(self._start, self._end)
            rows, data = self._rows[live], self._data[live]
        new_rows, new_data = np.empty(capacity, ROW), np.empty(capacity, object)
        n = len(rows)
        new_rows[:n] = rows
        new_data[:n] = data
        self._rows, self._data = new_rows, new_data
        self._start, self._end = 0, n

    def _compact(self) -> None:
        """Move the live rows to the front of their allocation, in blocks no longer than the
        distance they move (non-overlapping copies need no temporary)."""
        start, end = self._start, self._end
        if not start:
            return
        for src in range(start, end, start):
            stop = min(src + start, end)
            self._rows[src - start:stop - start] = self._rows[src:stop]
            self._data[src - start:stop - start] = self._data[src:stop]
        self._data[end - start:end] = None  # no stale references to data strings
        self._start, self._end = 0, end - start

    def _node_code(self, node: str) -> int:
        code = self._node_codes.get(node)
        if code is None:
            if len(self._nodes) >= MAX_NODES:
                raise ValueError(f"more than {MAX_NODES} nodes")
            code = self._node_codes[node] = len(self._nodes)
            self._nodes.append(node)
        return code

    def _shared(self, text: str) -> str:
        strings = self._strings
        found = strings.get(text)
        if found is None:
            if len(strings) >= MAX_STRINGS:
                strings.clear()
            found = strings[text] = text
        return found

    def _entries(self, positions: np.ndarray) -> list[Committed]:
        """`Committed` entries rebuilt from the live rows at `positions` (ascending), as the
        module docstring says: what windows read, the rest 0 or -1."""
        if not len(positions):
            return []
        positions = positions + self._start
        rows = self._rows[positions]
        nodes = self._nodes
        kinds = KIND_BY_VALUE
        sends: dict[tuple[int, int], Committed] = {}  # (node code, index) -> SEND among these
        out: list[Committed] = []
        for real, ident, send_index, kind, node, send_node, data in zip(
            rows["real"].tolist(), rows["id"].tolist(), rows["send_index"].tolist(), rows["kind"].tolist(),
            rows["node"].tolist(), rows["send_node"].tolist(), self._data[positions].tolist(),
        ):
            kind = kinds[kind]
            event = Event(nodes[node], kind, 0, ident, data)
            if kind is _SEND:
                entry = sends[(send_node, send_index)] = Committed(event, real, 0, send_index, None)
            else:
                send = sends.get((send_node, send_index)) if send_node != _NO_SEND else None
                entry = Committed(event, real, 0, -1, send)
            out.append(entry)
        return out
