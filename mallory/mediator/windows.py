"""Window summaries served from the mediator's live timeline.

The campaign loop asks, at the end of each step, "summarise everything in [t0, t1)". The
answer can only be given once the timeline's frontier has passed t1 (every event before t1
is committed); `WindowService.window` waits for that up to a deadline and otherwise says the
window is incomplete, so the loop records the step as late instead of learning from half a
window. Entries are kept from the moment they commit until a window after them is taken.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from mallory.timeline.abstraction import ABSTRACTIONS, behaviour
from mallory.timeline.builder import Committed
from mallory.timeline.window import EntryBuffer, summarize

#: entries older than this behind the newest commit are dropped even if no window took them
#: (a mediator nobody asks for windows must not grow without bound)
RETAIN_NS = 120_000_000_000


@dataclass(frozen=True)
class Window:
    """What the timeline says about [start, end): its summary under the asked abstraction,
    how many events it held, whether it was complete (the frontier passed its end in time),
    and its behaviour whatever the abstraction (timeline.abstraction.Behaviour): the code
    and log event types that occurred (`types`) and their happens-before pairs (`pairs`).
    An incomplete window shows the events committed so far: nothing should learn from it."""

    summary: frozenset[str]
    events: int
    complete: bool
    frontier_ns: int | None = None
    types: frozenset[str] = frozenset()
    pairs: frozenset[str] = frozenset()

    def to_json(self) -> dict:
        return {"complete": self.complete, "events": self.events, "frontier_ns": self.frontier_ns,
                "summary": sorted(self.summary), "types": sorted(self.types), "pairs": sorted(self.pairs)}

    @classmethod
    def from_json(cls, answer: dict) -> "Window":
        return cls(frozenset(answer["summary"]), int(answer["events"]), bool(answer["complete"]),
                   answer.get("frontier_ns"), frozenset(answer.get("types", ())), frozenset(answer.get("pairs", ())))


class WindowService:
    """Subscribe `on_commit` to the ingest; call `window` from the API."""

    def __init__(self, frontier: Callable[[], int | None], retain_ns: int = RETAIN_NS) -> None:
        self._frontier = frontier
        self._buffer = EntryBuffer()
        self._cond = threading.Condition()
        self.retain_ns = retain_ns
        self.served = 0
        self.incomplete = 0

    def on_commit(self, entries: list[Committed]) -> None:
        with self._cond:
            self._buffer.add(entries)
            if entries:  # nobody may be asking for windows: keep only the last retain_ns
                self._buffer.release_before(entries[-1].real_ns - self.retain_ns, slack=self.retain_ns // 2)
            self._cond.notify_all()

    def window(self, start_ns: int, end_ns: int, wait_s: float, abstraction: str = "event-history") -> Window:
        """[start_ns, end_ns) summarised by `abstraction`, once the frontier passes end_ns or
        `wait_s` runs out (then incomplete). ValueError for an unknown abstraction or an
        empty span."""
        if abstraction not in ABSTRACTIONS:
            raise ValueError(f"unknown abstraction {abstraction!r}; choose one of {sorted(ABSTRACTIONS)}")
        if end_ns <= start_ns:
            raise ValueError("a window needs end_ns > start_ns")
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
        with self._cond:
            if complete:
                inside = self._buffer.take(start_ns, end_ns)
            else:
                # The window may be asked for again once complete: keep its entries.
                inside = self._buffer.peek(start_ns, end_ns)
                self._buffer.release_before(end_ns - self.retain_ns)
        self.served += 1
        self.incomplete += not complete
        seen = behaviour(inside)
        return Window(frozenset(summarize(inside, abstraction)), len(inside), complete, frontier, seen.types, seen.pairs)
