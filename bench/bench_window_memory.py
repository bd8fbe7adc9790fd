"""The mediator's window memory at a given event rate, in process: time-only bound vs rows.

A synthetic 3-node stream (30% packet events) at `--rate` events/s for `--seconds` of stream
time goes through the mediator's path (TimelineBuilder -> WindowService.on_commit) twice,
under tracemalloc, while the campaign loop's ask pattern runs on stream time: a schedule
asks for the window_s before its start, then `--steps` windows of window_s one after the
other, then asks nothing for `--gap` seconds (heal, reset, checks, the next schedule's
setup), and so on. The frontier is the stream's, so every window is complete on time.

* baseline: the WindowService before bounded rows: `Committed` objects in an EntryBuffer,
  released only by time (RETAIN_NS, in steps of half of it);
* rows: the WindowService as it is (EntryRows: compact rows, at most --max-entries).

Printed per variant: peak traced memory (builder + buffer + a window's work or a growing
buffer's reallocation), traced memory held when the most entries were retained (builder +
buffer: what stays as the allocator's high-water mark), the most entries retained at once,
windows asked, entries dropped; then the ratios baseline / rows, and how many windows got
the same answer (summary, events, complete) from both.

    nice -n 19 .venv/bin/python bench/bench_window_memory.py [--rate 6000] [--seconds 80] [--gap 40]
"""

from __future__ import annotations

import argparse
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass, field

from mallory.mediator.windows import WindowService
from mallory.timeline.builder import TimelineBuilder
from mallory.timeline.event import Batch, ClockPair
from mallory.timeline.rows import MAX_ENTRIES
from mallory.timeline.synthetic import synthetic_stream
from mallory.timeline.window import EntryBuffer

NODES = ["n1", "n2", "n3"]


class TimeOnlyBuffer(EntryBuffer):
    """The buffer WindowService had before EntryRows: Committed objects, no bound in number."""

    dropped = 0
    max_entries = None

    @property
    def capacity(self) -> int:
        return len(self)

    def truncated(self, t0: int) -> bool:
        return False


@dataclass
class Run:
    name: str
    peak_mb: float = 0.0
    peak_entries: int = 0
    held_mb: float = 0.0  # traced memory when the most entries were retained (no window at work)
    #: (start, end, hash of the summary, events, complete) of every window asked for: a
    #: summary itself (tens of thousands of tokens) would weigh more than the buffer
    windows: list[tuple[int, int, int, int, bool]] = field(default_factory=list)
    dropped: int = 0
    seconds: float = 0.0


@dataclass
class AskPattern:
    """The campaign loop's windows on stream time (see campaign/loop.py)."""

    window_ns: int
    steps: int
    gap_ns: int
    next_ask: int | None = None
    step: int = -1  # -1: the schedule's first window (looking back) is next
    start: int = 0

    def due(self, now: int) -> tuple[int, int] | None:
        """The window to ask for at stream time `now`, if one is due."""
        if self.next_ask is None:
            self.next_ask = now + self.window_ns  # the stream's first window_s: nothing to look back on
        if now < self.next_ask:
            return None
        if self.step == -1:  # a schedule starts: where is it?
            self.step, self.start, self.next_ask = 0, now, now + self.window_ns
            return now - self.window_ns, now
        t0 = self.start
        self.step += 1
        self.start = now
        if self.step == self.steps:  # the schedule ends; the next starts after the gap
            self.step, self.next_ask = -1, now + self.gap_ns
        else:
            self.next_ask = now + self.window_ns
        return t0, now


def run(name: str, make: Callable[[Callable[[], int | None]], WindowService], args: argparse.Namespace) -> Run:
    """One pass of the stream through a builder and the WindowService `make(frontier)` gives."""
    result = Run(name)
    tracemalloc.start()
    builder = TimelineBuilder(nodes=NODES)
    windows = make(lambda: builder.frontier_ns)
    pattern = AskPattern(int(args.window_s * 1e9), args.steps, int(args.gap * 1e9))
    buffer = windows._buffer
    started = time.perf_counter()
    try:
        for record in synthetic_stream(int(args.rate * args.seconds), n_nodes=len(NODES), packet_share=0.3,
                                       events_per_s=args.rate, seed=5):
            if isinstance(record, ClockPair):
                builder.add_clock(record)
                continue
            assert isinstance(record, Batch)
            builder.add_batch(record)
            windows.on_commit(builder.drain())
            if len(buffer) >= result.peak_entries:
                result.peak_entries = len(buffer)
                result.held_mb = tracemalloc.get_traced_memory()[0] / 2**20
            now = builder.frontier_ns
            asked = pattern.due(now) if now is not None else None
            if asked is not None:
                window = windows.window(*asked, wait_s=0.0)
                result.windows.append((*asked, hash(window.summary), window.events, window.complete))
        result.peak_mb = tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()
    result.seconds = time.perf_counter() - started
    result.dropped = buffer.dropped
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=int, default=6_000, help="events/s (the 94-min soak's ~6,000)")
    parser.add_argument("--seconds", type=float, default=80.0, help="of stream time")
    parser.add_argument("--window-s", type=float, default=2.5)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--gap", type=float, default=40.0, help="seconds between schedules without asks")
    parser.add_argument("--max-entries", type=int, default=MAX_ENTRIES)
    args = parser.parse_args()

    def time_only(frontier: Callable[[], int | None]) -> WindowService:
        windows = WindowService(frontier)
        windows._buffer = TimeOnlyBuffer()
        return windows

    # windows are asked for once the frontier passed them: wait_s=0 finds them complete
    runs = [run("baseline (time only)", time_only, args),
            run("rows (bounded)", lambda frontier: WindowService(frontier, max_entries=args.max_entries), args)]
    print(f"{args.rate:,} events/s for {args.seconds:g} s of stream ({int(args.rate * args.seconds):,} events), "
          f"window {args.window_s:g} s, {args.steps} steps, {args.gap:g} s between schedules")
    for r in runs:
        print(f"{r.name:22} peak traced {r.peak_mb:6.1f} MB  held at peak retained {r.held_mb:6.1f} MB  "
              f"peak retained {r.peak_entries:>9,}  "
              f"windows {len(r.windows)}  dropped {r.dropped:,}  ({r.seconds:.1f} s)")
    base, rows = runs
    print(f"ratio baseline/rows: peak traced memory {base.peak_mb / rows.peak_mb:.2f}, "
          f"held at peak retained {base.held_mb / rows.held_mb:.2f}, "
          f"peak retained entries {base.peak_entries / max(rows.peak_entries, 1):.2f}")
    same = sum(1 for a, b in zip(base.windows, rows.windows) if a == b)
    print(f"windows answered alike: {same} of {len(base.windows)}")


if __name__ == "__main__":
    main()
