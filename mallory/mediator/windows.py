"""Window summaries served from the mediator's live timeline.

The campaign loop asks, at the end of each step, "summarise everything in [t0, t1)". The
answer can only be given once the timeline's frontier has passed t1 (every event before t1
is committed); `WindowService.window` waits for that up to a deadline and otherwise says the
window is incomplete, so the loop records the step as late instead of learning from half a
window.

Memory. Entries are kept from the moment they commit until a window after them is taken, as
compact rows (timeline/rows.py, 37 B an entry instead of ~450 B as `Committed` objects),
bounded twice, so that what the mediator holds does not follow the SUT's event rate:

* by time: entries more than `retain_ns` behind the newest commit are released even if no
  window took them (nobody may be asking: between schedules, or no campaign at all);
* by number: at most `max_entries` (the oldest beyond it are dropped). At a high event rate
  this is the bound that holds: 120 s of a 6,000 events/s stream would be 720,000 entries.

What asks for windows, and how far back: the campaign loop asks at the end of each step for
[step start, now), and at the start of a schedule for the window_s (2.5 s by default) before
now; the Jepsen advisor for the span since its previous ask. Neither asks for anything older
than its previous window's end, except a schedule's first window, which looks back one window
from now. So there is no point before which everything may go: releasing at a schedule's end
would lose the next schedule's first window (and no call marks that end: /test/start and
/test/end are the Jepsen harness's, the loop calls neither). A release on the loop's behalf
could only drop what is older than one window before now, the part the bounds above already
cap; they leave the first window whole whenever the stream's last window_s fits in
`max_entries` (2.5 s of 100,000 events/s).

What a window reads of an entry (abstraction.py, `behaviour`, `trace_of`): its event's node,
kind, id or data (its type), and for a RECV which SEND of the window it receives; selection
and `causal_times` read its real_ns. That is all the rows keep: the entries a window is given
have no ts, lamport or (but a SEND's) index (rows.py says what they carry instead), and
nothing here may start reading them. While a window is answered its entries exist as
`Committed` objects: one window's worth, freed after.
A window with entries dropped before it was asked for is `truncated`: reported incomplete
(nothing learns from part of a window) and counted. So is one starting before the timeline
builder's `lost_until_ns` (`lost_until`): the builder's own bounds skipped events of a node's
sequence gap or committed a RECV without its SEND there (timeline/builder.py). `stats()`
gives the counters (the mediator's /metrics, under "windows").
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from mallory.timeline.abstraction import ABSTRACTIONS, behaviour, event_type
from mallory.timeline.builder import Committed
from mallory.timeline.event import Kind
from mallory.timeline.rows import MAX_ENTRIES, EntryRows
from mallory.timeline.window import summarize

#: entries older than this behind the newest commit are dropped even if no window took them
#: (a mediator nobody asks for windows must not grow without bound)
RETAIN_NS = 120_000_000_000
#: packets are the bulk of a window and never a model's events: their types are not made
_UNTRACED = frozenset({Kind.SEND, Kind.RECV, Kind.WINDOW_START, Kind.WINDOW_END})
#: the mediator's own events (service.py): no message orders them against the nodes' events
_OWN = frozenset({Kind.FAULT, Kind.CLIENT_INVOKE, Kind.CLIENT_COMPLETE})


@dataclass(frozen=True)
class Window:
    """What the timeline says about [start, end): its summary under the asked abstraction,
    how many events it held, whether it was complete (the frontier passed its end in time),
    and its behaviour whatever the abstraction (timeline.abstraction.Behaviour): the code
    and log event types that occurred (`types`) and their happens-before pairs (`pairs`);
    and the trace asked for, (node, type) in the order `trace_of` says (empty if none was asked).
    An incomplete window shows the events committed so far: nothing should learn from it.
    `truncated`: entries of the span were dropped (the buffer's bounds, or the timeline
    builder's: `WindowService`) before it was asked for; such a window is incomplete too,
    whatever the frontier. `trace_cut`: entries of the trace's part before the window were
    dropped (either way), so the trace starts at the window's start instead (a model fed
    trace after trace has lost events: it must start over)."""

    summary: frozenset[str]
    events: int
    complete: bool
    frontier_ns: int | None = None
    types: frozenset[str] = frozenset()
    pairs: frozenset[str] = frozenset()
    truncated: bool = False
    trace: tuple[tuple[str, str], ...] = ()
    trace_cut: bool = False

    def to_json(self) -> dict:
        return {"complete": self.complete, "events": self.events, "frontier_ns": self.frontier_ns,
                "summary": sorted(self.summary), "types": sorted(self.types), "pairs": sorted(self.pairs),
                "truncated": self.truncated, "trace": [list(step) for step in self.trace], "trace_cut": self.trace_cut}

    @classmethod
    def from_json(cls, answer: dict) -> "Window":
        return cls(frozenset(answer["summary"]), int(answer["events"]), bool(answer["complete"]),
                   answer.get("frontier_ns"), frozenset(answer.get("types", ())), frozenset(answer.get("pairs", ())),
                   bool(answer.get("truncated", False)), tuple((node, kind) for node, kind in answer.get("trace", ())),
                   bool(answer.get("trace_cut", False)))


def trace_of(entries: list[Committed], types: frozenset[str]) -> tuple[tuple[str, str], ...]:
    """(node, type) of the entries whose type is one of `types`, in a causal order that
    keeps real time: each event at its time, or later if it must follow its node's previous
    event or, for a RECV, its SEND (`causal_times`); ties in commit order, the mediator's
    own events (faults, client operations) first. Commit order alone cannot be the order:
    no message places the mediator's events against the nodes' (a recorded raft-kv heal came
    40 ms before the first events of the nodes it restarted, which commit order put first),
    and it lags real time on a node whose batches came late (a recorded example-SUT node's
    last events before its kill, 3 to 27 ms earlier, committed after the other nodes' events
    that followed the kill, so the model saw a killed node speak)."""
    at = causal_times(entries)
    traced = []
    for i, entry in enumerate(entries):
        event = entry.event
        if event.kind not in _UNTRACED:
            name = event_type(event)
            if name in types:
                traced.append((at[i], event.kind not in _OWN, i, event.node, name))
    traced.sort()
    return tuple((node, name) for _, _, _, node, name in traced)


def causal_times(entries: list[Committed]) -> list[int]:
    """Per entry (in commit order), its real time raised to that of its node's previous
    entry and, for a RECV, of its SEND: nondecreasing along every happens-before edge, so
    sorting by it (ties in commit order) keeps the order causal. Nodes on one machine
    share its monotonic clock, so there a raise only absorbs the clock pairs' error. A RECV
    whose SEND is not among `entries` stays at its own time (the mediator's buffer links a
    RECV to its SEND only within what it returns: timeline/rows.py); such a SEND is before
    the span, earlier than the RECV anyway, unless clocks disagree by more than the span."""
    last: dict[str, int] = {}
    sends: dict[int, int] = {}  # id of a SEND entry -> its causal time
    out = []
    for entry in entries:
        t = max(entry.real_ns, last.get(entry.event.node, entry.real_ns))
        if entry.send is not None:
            t = max(t, sends.get(id(entry.send), entry.send.real_ns))
        elif entry.event.kind is Kind.SEND:
            sends[id(entry)] = t
        last[entry.event.node] = t
        out.append(t)
    return out


class WindowService:
    """Subscribe `on_commit` to the ingest; call `window` from the API."""

    def __init__(self, frontier: Callable[[], int | None], retain_ns: int = RETAIN_NS,
                 max_entries: int = MAX_ENTRIES, lost_until: Callable[[], int | None] = lambda: None) -> None:
        """frontier: the builder's frontier_ns; lost_until: its lost_until_ns (windows starting
        before it are truncated). Both are called without this service's lock held."""
        self._frontier = frontier
        self._lost_until = lost_until
        self._buffer = EntryRows(max_entries)
        self._cond = threading.Condition()
        self.retain_ns = retain_ns
        self.served = 0
        self.incomplete = 0
        self.truncated = 0

    def stats(self) -> dict[str, int]:
        """Windows served, incomplete (of them) and truncated (of those); entries committed
        after a window ending past them was taken (`late`), in no window (`unwindowed`: the
        campaign's windows leave gaps between steps), dropped unasked (`dropped`), held now
        (`retained`, in `capacity` rows allocated) and at most (`max_entries`)."""
        with self._cond:
            buffer = self._buffer
            return {"served": self.served, "incomplete": self.incomplete, "truncated": self.truncated,
                    "late": buffer.late, "unwindowed": buffer.unwindowed, "dropped": buffer.dropped, "retained": len(buffer),
                    "capacity": buffer.capacity, "max_entries": buffer.max_entries}

    def on_commit(self, entries: list[Committed]) -> None:
        with self._cond:
            self._buffer.add(entries)
            if entries:  # nobody may be asking for windows: keep only the last retain_ns
                self._buffer.release_before(entries[-1].real_ns - self.retain_ns, slack=self.retain_ns // 2)
            self._cond.notify_all()

    def window(self, start_ns: int, end_ns: int, wait_s: float, abstraction: str = "event-history",
               trace: frozenset[str] = frozenset(), trace_from_ns: int | None = None) -> Window:
        """[start_ns, end_ns) summarised by `abstraction`, once the frontier passes end_ns or
        `wait_s` runs out (then incomplete), with the trace of the `trace` types over
        [trace_from_ns, end_ns) (trace_from_ns at most start_ns; None: start_ns). ValueError
        for an unknown abstraction or a bad span."""
        if abstraction not in ABSTRACTIONS:
            raise ValueError(f"unknown abstraction {abstraction!r}; choose one of {sorted(ABSTRACTIONS)}")
        if end_ns <= start_ns:
            raise ValueError("a window needs end_ns > start_ns")
        first = start_ns if trace_from_ns is None else trace_from_ns
        if first > start_ns:
            raise ValueError("a trace cannot start after its window (trace_from_ns > start_ns)")
        deadline = time.monotonic() + max(0.0, wait_s)
        while True:
            # Read the frontier without holding our lock: the ingest holds its own lock while
            # it hands us entries, so taking them in the other order could deadlock. Entries
            # committed before the frontier moved are already ours when we read it.
            frontier = self._frontier()
            complete = frontier is not None and frontier >= end_ns
            remaining = deadline - time.monotonic()
            if complete or remaining <= 0:
                break
            with self._cond:
                self._cond.wait(min(remaining, 0.02))
        # After the frontier: a loss in the builder before the frontier passed end_ns is seen.
        lost_until = self._lost_until()

        def cut(t: int) -> bool:
            return self._buffer.truncated(t) or (lost_until is not None and t < lost_until)

        with self._cond:
            truncated = cut(start_ns)
            trace_cut = first < start_ns and cut(first)
            if trace_cut:  # a trace missing its beginning would pass for whole: it starts at the window
                first = start_ns
            if complete:  # a truncated window cannot become whole: taken all the same
                traced = self._buffer.take(first, end_ns)
            else:
                # The window may be asked for again once complete: keep its entries.
                traced = self._buffer.peek(first, end_ns)
                self._buffer.release_before(end_ns - self.retain_ns)
            complete = complete and not truncated
            self.served += 1
            self.incomplete += not complete
            self.truncated += truncated
        inside = traced if first == start_ns else [e for e in traced if e.real_ns >= start_ns]
        seen = behaviour(inside)
        return Window(frozenset(summarize(inside, abstraction)), len(inside), complete, frontier, seen.types, seen.pairs,
                      truncated, trace_of(traced, trace) if trace else (), trace_cut)
