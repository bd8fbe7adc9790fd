"""Events/s through ingest -> timeline -> EventHistory, and memory along the way.

A 5-node synthetic stream of 1M events (10% packet events) is written in the wire codec to
a temporary file first, then read line by line: decode, build the timeline, cut 2.5 s
windows as the frontier passes them, and summarise each window with EventHistory. RSS is
read at 100k and at 1M events: flat memory means the two are close.
Target: >= 150,000 events/s on one core.

    .venv/bin/python bench/bench_timeline_throughput.py [--events N]
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time

from mallory.cli import tune_gc
from mallory.timeline.builder import TimelineBuilder
from mallory.timeline.codec import decode, write_records
from mallory.timeline.event import Batch
from mallory.timeline.synthetic import synthetic_stream
from mallory.timeline.window import Timeline, summarize

WINDOW_NS = 2_500_000_000


def rss_mib() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=1_000_000)
    args = parser.parse_args()
    tune_gc()  # as every mallory command does

    with tempfile.NamedTemporaryFile(suffix=".jsonl") as f:
        t = time.perf_counter()
        write_records(f, synthetic_stream(args.events, n_nodes=5, packet_share=0.1))
        f.flush()
        print(f"generated {args.events} events in {time.perf_counter() - t:.1f} s ({f.tell() / 2**20:.0f} MiB)")
        f.seek(0)

        timeline = Timeline(TimelineBuilder(nodes=[f"n{i + 1}" for i in range(5)]))
        seen = windows = tokens = 0
        next_report = 100_000
        window_start = None
        rss_at: dict[int, float] = {}
        start = time.perf_counter()
        for line in f:
            record = decode(line)
            timeline.add(record)
            if isinstance(record, Batch):
                seen += len(record.events)
                if window_start is None:
                    window_start = timeline.origin()
                while window_start is not None and timeline.complete_until(window_start + WINDOW_NS):
                    tokens += len(summarize(timeline.take(window_start, window_start + WINDOW_NS)))
                    windows += 1
                    window_start += WINDOW_NS
                if seen >= next_report:
                    rss_at[next_report] = rss_mib()
                    next_report = {100_000: 250_000, 250_000: 500_000}.get(next_report, next_report * 2)
        timeline.finish()
        if window_start is not None:
            tokens += len(summarize(timeline.take(window_start, 2**63)))
            windows += 1
        elapsed = time.perf_counter() - start

    stats = timeline.builder.stats()
    print(f"events: {seen}, committed: {stats['committed']}, windows: {windows}, summary tokens: {tokens}")
    print(f"unmatched RECVs: {stats['unmatched_recvs']}")
    print(f"throughput: {seen / elapsed:,.0f} events/s ({elapsed:.2f} s; target >= 150,000)")
    for n, mib in sorted(rss_at.items()):
        print(f"RSS at {n:>9,} events: {mib:.1f} MiB")
    print(f"peak RSS: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.1f} MiB")
    if len(rss_at) >= 2:
        first, last = rss_at[min(rss_at)], rss_at[max(rss_at)]
        print(f"RSS ratio {max(rss_at):,} / {min(rss_at):,} events: {last / first:.2f}")
        print("(the table of SENDs awaiting late RECVs fills for link_timeout = 30 s of stream time,")
        print(" 300k events here, then memory stays flat)")


if __name__ == "__main__":
    main()
