"""What a bug page costs: reading a campaign's recording, vector clocks, SVG, ShiViz.

A 3-node synthetic stream (30% packet events) is written in the wire codec to a temporary
file. Baseline: decoding it and building the whole timeline (what `mallory analyze` does
before windows). Then `read_recording` (the same build, plus loss counts and keeping one
schedule's span, the last 35 s), and for one step window's diagram (its first 1500 events):
vector clocks, the ShiViz log and the SVG. Times are the best of 3 runs for the two passes,
as ratios against the baseline measured in the same run (the machine is shared; absolute
numbers are noisy).

    .venv/bin/python bench/bench_report_timeline.py [--events N]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from mallory.cli import tune_gc
from mallory.report.names import EventNamer
from mallory.report.recording import ALL_TIME, read_recording
from mallory.report.shiviz import shiviz_log
from mallory.report.sources import DEFAULT_MAX_EVENTS
from mallory.report.timeline_view import head_by_time, timeline_svg
from mallory.report.vclock import vector_clocks
from mallory.timeline.builder import TimelineBuilder
from mallory.timeline.codec import read_records, write_records
from mallory.timeline.synthetic import synthetic_stream
from mallory.timeline.window import Timeline

RATE = 2000  # events per second of simulated time, all nodes


def timed(fn, repeat: int = 1):
    """fn's value and its best time over `repeat` runs (the least disturbed by other load)."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        value = fn()
        best = min(best, time.perf_counter() - t0)
    return value, best


def baseline(path: Path) -> int:
    timeline = Timeline(TimelineBuilder())
    n = 0
    with open(path, "rb") as f:
        for record in read_records(f):
            timeline.add(record)
            n += len(timeline.take(*ALL_TIME))
    timeline.finish()
    return n + len(timeline.take(*ALL_TIME))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=300_000)
    args = parser.parse_args()
    tune_gc()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "events.jsonl"
        with open(path, "wb") as f:
            write_records(f, synthetic_stream(args.events, n_nodes=3, packet_share=0.3, events_per_s=RATE, seed=1))
        committed, t_base = timed(lambda: baseline(path), 3)
        whole, _ = timed(lambda: read_recording([path], [ALL_TIME]))
        end = max(e.real_ns for e in whole.spans[0])
        span = (end - 35_000_000_000, end + 1)
        rec, t_read = timed(lambda: read_recording([path], [span]), 3)
        step = [e for e in rec.spans[0] if e.real_ns < span[0] + 2_500_000_000]  # one 2.5 s step window
        entries = head_by_time(step, DEFAULT_MAX_EVENTS)
        namer = EventNamer()
        _, t_vc = timed(lambda: vector_clocks(entries))
        shiviz, t_shiviz = timed(lambda: shiviz_log(entries, namer))
        svg, t_svg = timed(lambda: timeline_svg(entries, namer))
    print(f"events committed                 : {committed}")
    print(f"baseline: decode + build timeline: {t_base:.2f} s ({committed / t_base:,.0f} events/s)")
    print(f"read_recording, one 35 s span    : {t_read:.2f} s  ratio to baseline {t_read / t_base:.2f}")
    print(f"  span entries / one diagram     : {len(rec.spans[0])} / {len(entries)}")
    print(f"vector clocks ({len(entries)} events)     : {t_vc * 1e3:.1f} ms  ratio {t_vc / t_base:.4f}")
    print(f"ShiViz log                       : {t_shiviz * 1e3:.1f} ms  ratio {t_shiviz / t_base:.4f}  ({len(shiviz) / 1024:.0f} KiB)")
    print(f"SVG                              : {t_svg * 1e3:.1f} ms  ratio {t_svg / t_base:.4f}  ({len(svg) / 1024:.0f} KiB)")


if __name__ == "__main__":
    main()
