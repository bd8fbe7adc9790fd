"""Which allocator keeps the mediator's memory flat through bursts: pymalloc or glibc malloc?

The mediator's window path (TimelineBuilder -> WindowService.on_commit, with the campaign
loop's windows asked on stream time, as in bench_window_memory.py) takes --bursts segments
of a synthetic 3-node stream, --seconds of stream time each, alternating --low and --high
events/s. After each segment the segment's builder and window service are let go and the
mediator's minute's memory return runs (mediator/memory.py: a full collection, then
malloc_trim); what a window answered (its span and summary size) is kept, as the mediator
keeps small records past a burst. Each allocator runs in a child process of its own
(PYTHONMALLOC=pymalloc, then =malloc; both with MALLOC_ARENA_MAX=2, as the campaign starts
the mediator).

Printed per allocator: the resident memory after each segment's memory return, its growth
from the first to the last segment, the peak RSS, and the CPU time of the whole run; then
the ratios malloc / pymalloc of CPU time and of the resident memory after the last segment.
Flat is what the soak asks of the mediator: pymalloc frees a 1 MiB arena only once every
object in it is gone, malloc_trim every free 4 KiB page of malloc's heaps.

    .venv/bin/python bench/bench_mediator_allocator.py [--bursts 14] [--seconds 20] [--low 6000] [--high 30000]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from bench_window_memory import NODES, AskPattern  # noqa: E402

from mallory.mediator import memory  # noqa: E402
from mallory.mediator.windows import WindowService  # noqa: E402
from mallory.timeline.builder import TimelineBuilder  # noqa: E402
from mallory.timeline.event import ClockPair  # noqa: E402
from mallory.timeline.synthetic import synthetic_stream  # noqa: E402

ALLOCATORS = ("pymalloc", "malloc")


def segment(rate: int, seconds: float, seed: int, kept: list) -> None:
    """One burst through a builder and a window service of its own, which go when it ends."""
    builder = TimelineBuilder(nodes=NODES)
    windows = WindowService(lambda: builder.frontier_ns)
    pattern = AskPattern(int(2.5e9), 12, int(10e9))
    for record in synthetic_stream(int(rate * seconds), n_nodes=len(NODES), packet_share=0.3,
                                   events_per_s=rate, seed=seed):
        if isinstance(record, ClockPair):
            builder.add_clock(record)
            continue
        builder.add_batch(record)
        windows.on_commit(builder.drain())
        now = builder.frontier_ns
        asked = pattern.due(now) if now is not None else None
        if asked is not None:
            kept.append((asked, len(windows.window(*asked, wait_s=0.0).summary)))


def child(args: argparse.Namespace) -> dict:
    """The run under this process's allocator: RSS after each segment, peak RSS, CPU seconds."""
    kept: list = []
    after: list[float] = []
    started = time.process_time()
    for i in range(args.bursts):
        segment(args.high if i % 2 else args.low, args.seconds, i, kept)
        memory.return_free_memory()
        after.append(memory.process_memory()["rss_mb"])
    return {"after_mb": after, "cpu_s": round(time.process_time() - started, 2),
            "peak_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bursts", type=int, default=14, help="segments, low and high rate in turn")
    parser.add_argument("--seconds", type=float, default=20.0, help="of stream time per segment")
    parser.add_argument("--low", type=int, default=6_000, help="events/s (the soak's level load)")
    parser.add_argument("--high", type=int, default=30_000, help="events/s (a burst: the soak's bursts reached "
                        "~3,000/s; a higher rate makes a burst's high-water mark plain in seconds)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args)))
        return
    runs = {}
    for allocator in ALLOCATORS:
        env = {**os.environ, "PYTHONMALLOC": allocator, "MALLOC_ARENA_MAX": "2"}
        out = subprocess.run([sys.executable, __file__, "--child", *sys.argv[1:]], env=env, check=True,
                             capture_output=True, text=True).stdout
        runs[allocator] = json.loads(out)
    print(f"{args.bursts} segments of {args.seconds:g} s of stream, {args.low:,} and {args.high:,} events/s in turn")
    for allocator, run in runs.items():
        after = run["after_mb"]
        print(f"{allocator:9} RSS after each segment (MB): {' '.join(f'{mb:.0f}' for mb in after)}")
        print(f"{'':9} growth first -> last {after[-1] - after[0]:+.1f} MB, peak {run['peak_mb']:.0f} MB, "
              f"CPU {run['cpu_s']:.1f} s")
    py, ma = runs["pymalloc"], runs["malloc"]
    print(f"ratio malloc/pymalloc: CPU {ma['cpu_s'] / py['cpu_s']:.2f}, "
          f"RSS after the last segment {ma['after_mb'][-1] / py['after_mb'][-1]:.2f}, "
          f"peak RSS {ma['peak_mb'] / py['peak_mb']:.2f}")


if __name__ == "__main__":
    main()
