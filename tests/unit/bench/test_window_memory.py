"""bench/bench_window_memory.py's ask pattern (the campaign loop's, on stream time) and a
short pass of both variants. Nothing here is timed."""

from __future__ import annotations

import argparse

from mallory.mediator.windows import WindowService
from tests.unit.bench.bench_module import load_bench

bench = load_bench("bench_window_memory")
S = 1_000_000_000


def test_ask_pattern_is_the_loops_first_window_then_steps_then_a_gap():
    pattern = bench.AskPattern(window_ns=2 * S, steps=2, gap_ns=10 * S)
    asks = [(now, pattern.due(now * S)) for now in range(0, 30)]
    asked = [(now, (a[0] // S, a[1] // S)) for now, a in asks if a is not None]
    assert asked == [
        (2, (0, 2)),  # the first schedule looks back one window (as far as the stream goes)
        (4, (2, 4)), (6, (4, 6)),  # its two steps, one after the other
        (16, (14, 16)),  # after the gap: the next schedule looks back one window
        (18, (16, 18)), (20, (18, 20)),
    ]


def test_a_short_pass_answers_alike_and_the_bound_drops():
    args = argparse.Namespace(rate=4_000, seconds=4.0, window_s=0.5, steps=2, gap=1.0, max_entries=2_000)
    base = bench.run("baseline", lambda frontier: _time_only(frontier), args)
    rows = bench.run("rows", lambda frontier: WindowService(frontier, max_entries=50_000), args)
    bounded = bench.run("bounded", lambda frontier: WindowService(frontier, max_entries=args.max_entries), args)
    assert len(base.windows) >= 4 and base.windows == rows.windows
    assert all(complete for *_, complete in rows.windows)
    assert base.dropped == rows.dropped == 0 and bounded.dropped > 0 and bounded.peak_entries == 2_000
    assert base.peak_entries == rows.peak_entries > 2_000


def _time_only(frontier):
    windows = WindowService(frontier)
    windows._buffer = bench.TimeOnlyBuffer()
    return windows
